//! Names given away from the host (`--symbols`): the functions a host could
//! not name (stripped code, kept with its binary's build id and its address
//! in the file) are named from a directory of debug files laid out by build
//! id, or from a debuginfod server, and the profile's functions that then
//! share a name become one.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use object::Object;
use profd_common::model::{FunctionInfo, ResolvedProfile};

use crate::error::Error;

/// How long a debuginfod request may take, the file's download included.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Where debug files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SymbolSource {
    /// A directory with `.build-id/xx/rest.debug` files (as
    /// `/usr/lib/debug`, or what `debuginfod -F` serves).
    Dir(PathBuf),
    /// A debuginfod server: `GET URL/buildid/HEX/debuginfo`.
    Debuginfod(String),
}

/// Why a `--symbols` source, or a debug file from one, could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Missing {
    /// `--symbols` named neither a URL nor a directory.
    #[error(
        "{0} is neither an http(s):// URL of a debuginfod server nor a directory of debug files"
    )]
    NotASource(String),
    /// The build id cannot name a file.
    #[error("build id {0} is too short or not hexadecimal")]
    BadBuildId(String),
    /// The directory has no file of that build.
    #[error("no {}", .0.display())]
    NotInDir(PathBuf),
    /// The server could not be asked or answered badly.
    #[error("{url}: {source}")]
    Request {
        /// The URL asked.
        url: String,
        /// What failed.
        source: reqwest::Error,
    },
    /// The server answered with another status than success.
    #[error("{url}: {status}")]
    Status {
        /// The URL asked.
        url: String,
        /// Its answer.
        status: reqwest::StatusCode,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not ELF.
    #[error("{what} is not an ELF file: {source}")]
    NotElf {
        /// The file or URL.
        what: String,
        /// What the parse said.
        source: object::Error,
    },
    /// The file is another build's.
    #[error("{what} has build id {id}")]
    OtherBuild {
        /// The file or URL.
        what: String,
        /// Its build id.
        id: String,
    },
    /// The file has no build id.
    #[error("{0} has no build id")]
    NoBuildId(String),
    /// The file has neither a symbol table nor DWARF.
    #[error("{0} has no symbols")]
    NoSymbols(String),
    /// No source had the file: why each did not, in order.
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Nowhere(Vec<Missing>),
}

/// `--symbols URL|DIR`: an `http://` or `https://` URL, else a directory
/// that must exist.
pub fn parse_symbol_source(s: &str) -> Result<SymbolSource, Missing> {
    if s.starts_with("http://") || s.starts_with("https://") {
        return Ok(SymbolSource::Debuginfod(
            s.trim_end_matches('/').to_string(),
        ));
    }
    let dir = PathBuf::from(s);
    if dir.is_dir() {
        Ok(SymbolSource::Dir(dir))
    } else {
        Err(Missing::NotASource(s.to_string()))
    }
}

/// What naming did.
#[derive(Debug, Default)]
pub struct Named {
    /// Functions named.
    pub named: usize,
    /// Functions left unnamed: their binary's debug file was not found, or
    /// holds no symbol at their address.
    pub unnamed: usize,
    /// Build ids no source had a debug file for, with why.
    pub missing: Vec<(String, Missing)>,
}

/// Names the functions of `profile` that carry an origin, from `sources`
/// tried in order; functions that end up with the same name, module and
/// file become one.
pub async fn name_functions(
    profile: &mut ResolvedProfile,
    sources: &[SymbolSource],
) -> Result<Named, Error> {
    let mut by_build: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, f) in profile.functions.iter().enumerate() {
        if let Some(o) = f.origin.as_ref().filter(|o| !o.build_id.is_empty()) {
            by_build.entry(o.build_id.clone()).or_default().push(i);
        }
    }
    let mut named = Named::default();
    if by_build.is_empty() {
        return Ok(named);
    }
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| Error::Fleet(format!("cannot set up an HTTP client: {e}")))?;
    let symbolizer = Symbolizer::new();
    for (build_id, functions) in by_build {
        let file = match find(&client, sources, &build_id).await {
            Ok(file) => file,
            Err(why) => {
                named.unnamed += functions.len();
                named.missing.push((build_id, why));
                continue;
            }
        };
        let addrs: Vec<u64> = functions
            .iter()
            .map(|&i| {
                profile.functions[i]
                    .origin
                    .as_ref()
                    .map_or(0, |o| o.address)
            })
            .collect();
        let src = Source::Elf(Elf::new(file.as_path()));
        let found = symbolizer
            .symbolize(&src, Input::VirtOffset(&addrs))
            .map_err(|e| Error::BadFile {
                path: file.clone(),
                reason: e.to_string(),
            })?;
        for (&i, sym) in functions.iter().zip(found) {
            let f = &mut profile.functions[i];
            match sym {
                Symbolized::Sym(s) => {
                    f.name = s.name.to_string();
                    if let Some(info) = &s.code_info {
                        f.file = info.to_path().display().to_string();
                    }
                    f.origin = None;
                    named.named += 1;
                }
                Symbolized::Unknown(_) => named.unnamed += 1,
            }
        }
    }
    merge_same(profile);
    Ok(named)
}

/// The debug file of `build_id` from the first source that has it, else
/// why none had.
async fn find(
    client: &reqwest::Client,
    sources: &[SymbolSource],
    build_id: &str,
) -> Result<PathBuf, Missing> {
    let mut why = Vec::new();
    for source in sources {
        let found = match source {
            SymbolSource::Dir(dir) => in_dir(dir, build_id),
            SymbolSource::Debuginfod(url) => fetch(client, url, build_id).await,
        };
        match found {
            Ok(path) => return Ok(path),
            Err(e) => why.push(e),
        }
    }
    Err(Missing::Nowhere(why))
}

/// `DIR/.build-id/xx/rest.debug` (or the binary itself, `.../rest`).
fn in_dir(dir: &Path, build_id: &str) -> Result<PathBuf, Missing> {
    if build_id.len() < 3 {
        return Err(Missing::BadBuildId(build_id.to_string()));
    }
    let base = dir.join(".build-id").join(&build_id[..2]);
    for name in [
        format!("{}.debug", &build_id[2..]),
        build_id[2..].to_string(),
    ] {
        let path = base.join(name);
        if path.is_file() {
            check(&path, build_id)?;
            return Ok(path);
        }
    }
    Err(Missing::NotInDir(
        base.join(format!("{}.debug", &build_id[2..])),
    ))
}

/// The debug file from a debuginfod server, kept in profctl's cache
/// directory (`$XDG_CACHE_HOME/profd/debuginfod`, else
/// `~/.cache/profd/debuginfod`) for the next run.
async fn fetch(client: &reqwest::Client, url: &str, build_id: &str) -> Result<PathBuf, Missing> {
    if !build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Missing::BadBuildId(build_id.to_string()));
    }
    let cache = cache_dir().join(format!("{build_id}.debug"));
    if cache.is_file() && check(&cache, build_id).is_ok() {
        return Ok(cache);
    }
    let get = format!("{url}/buildid/{build_id}/debuginfo");
    let request = |source| Missing::Request {
        url: get.clone(),
        source,
    };
    let response = client.get(&get).send().await.map_err(request)?;
    if !response.status().is_success() {
        return Err(Missing::Status {
            url: get,
            status: response.status(),
        });
    }
    let body = response.bytes().await.map_err(request)?;
    check_elf(&*body, &get, build_id)?;
    let dir = cache.parent().unwrap_or(Path::new("."));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Missing::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!(".{build_id}.{}", std::process::id()));
    std::fs::write(&tmp, &body).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &cache).map_err(io(&cache))?;
    Ok(cache)
}

fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("profd").join("debuginfod")
}

/// `path` is an ELF file with the build id `build_id` (its headers, notes
/// and symbol tables are read, not its DWARF).
fn check(path: &Path, build_id: &str) -> Result<(), Missing> {
    let file = std::fs::File::open(path).map_err(|source| Missing::Io {
        path: path.to_path_buf(),
        source,
    })?;
    check_elf(
        &object::ReadCache::new(file),
        &path.display().to_string(),
        build_id,
    )
}

/// The ELF file in `data` (from `what`) has the build id `build_id`, and
/// symbols or DWARF.
fn check_elf<'a, R: object::ReadRef<'a>>(
    data: R,
    what: &str,
    build_id: &str,
) -> Result<(), Missing> {
    let what = what.to_string();
    let file = object::File::parse(data).map_err(|source| Missing::NotElf {
        what: what.clone(),
        source,
    })?;
    let id = file
        .build_id()
        .ok()
        .flatten()
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect::<String>());
    match id {
        Some(id) if id == build_id => {}
        Some(id) => return Err(Missing::OtherBuild { what, id }),
        None => return Err(Missing::NoBuildId(what)),
    }
    if file.section_by_name(".symtab").is_none() && file.section_by_name(".debug_info").is_none() {
        return Err(Missing::NoSymbols(what));
    }
    Ok(())
}

/// Functions equal once named become one; stacks refer to the first.
fn merge_same(profile: &mut ResolvedProfile) {
    let mut first: HashMap<FunctionInfo, u32> = HashMap::new();
    let mut kept = Vec::with_capacity(profile.functions.len());
    let remap: Vec<u32> = std::mem::take(&mut profile.functions)
        .into_iter()
        .map(|f| {
            *first.entry(f).or_insert_with_key(|f| {
                kept.push(f.clone());
                (kept.len() - 1) as u32
            })
        })
        .collect();
    profile.functions = kept;
    for stack in &mut profile.stacks {
        for frame in &mut stack.frames {
            if let Some(&to) = remap.get(frame.function as usize) {
                frame.function = to;
            }
        }
    }
}

#[cfg(test)]
#[path = "symbols_tests.rs"]
mod tests;
