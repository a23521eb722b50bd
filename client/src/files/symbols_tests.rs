//! Unit tests of naming off the host: a real program built here, its debug
//! file split off with objcopy, and profiles that refer to its stripped
//! code by build id and address.
use super::*;
use object::ObjectSymbol;
use profd_common::model::{FrameRef, Origin, ResolvedStack};
use std::process::Command;

fn run(cmd: &mut Command) {
    let status = cmd.status().expect("run the toolchain (gcc, binutils)");
    assert!(status.success(), "{cmd:?}");
}

/// A program with functions `alpha` and `beta`, its build id, their
/// addresses, and a directory holding its debug file by build id.
fn program(tag: &str) -> (PathBuf, String, u64, u64) {
    let dir = std::env::temp_dir().join(format!("profctl-symbols-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("p.c");
    std::fs::write(
        &src,
        "__attribute__((noinline)) int alpha(int x) { return x * 3 + 1; }\n\
         __attribute__((noinline)) int beta(int x) { return alpha(x) ^ 5; }\n\
         int main(int c, char **v) { (void)v; return beta(c); }\n",
    )
    .unwrap();
    let exe = dir.join("p");
    run(Command::new("gcc")
        .args(["-O1", "-g", "-Wl,--build-id", "-o"])
        .arg(&exe)
        .arg(&src));
    let data = std::fs::read(&exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let id: String = file
        .build_id()
        .unwrap()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let addr = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap()
            .address()
    };
    let (alpha, beta) = (addr("alpha"), addr("beta"));
    let debug = dir.join("debug");
    let at = debug.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&at).unwrap();
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(at.join(format!("{}.debug", &id[2..]))));
    (debug, id, alpha, beta)
}

fn unnamed(build_id: &str, address: u64) -> FunctionInfo {
    FunctionInfo {
        name: format!("p!{address:#x}"),
        module: "p".into(),
        origin: Some(Origin {
            build_id: build_id.into(),
            address,
        }),
        ..Default::default()
    }
}

fn frames(ids: &[u32]) -> Vec<FrameRef> {
    ids.iter()
        .map(|&function| FrameRef {
            function,
            ..Default::default()
        })
        .collect()
}

/// Functions named by address become the program's functions; two that
/// name one function become one, and stacks refer to it.
#[tokio::test]
async fn stripped_functions_are_named_from_a_directory_of_debug_files() {
    let (debug, id, alpha, beta) = program("dir");
    let mut p = ResolvedProfile {
        functions: vec![
            unnamed(&id, alpha),
            unnamed(&id, beta),
            unnamed(&id, alpha + 1),
        ],
        stacks: vec![
            ResolvedStack {
                tid: 1,
                frames: frames(&[0, 1]),
                count: 3,
            },
            ResolvedStack {
                tid: 1,
                frames: frames(&[2, 1]),
                count: 4,
            },
        ],
        ..Default::default()
    };
    let named = name_functions(&mut p, &[SymbolSource::Dir(debug)])
        .await
        .unwrap();
    assert_eq!((named.named, named.unnamed), (3, 0), "{named:?}");
    let names: Vec<&str> = p.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert!(p.functions.iter().all(|f| f.origin.is_none()));
    assert!(p.functions[0].file.ends_with("p.c"), "{:?}", p.functions[0]);
    assert_eq!(p.stacks[0].frames, frames(&[0, 1]));
    assert_eq!(p.stacks[1].frames, frames(&[0, 1]));
}

/// A debug file of another build, a missing one and a server that does
/// not answer name nothing, and each says why.
#[tokio::test]
async fn debug_files_of_other_builds_or_none_name_nothing() {
    let (debug, id, alpha, _) = program("other");
    let other = "00".repeat(20);
    let wrong = debug.join(".build-id").join(&other[..2]);
    std::fs::create_dir_all(&wrong).unwrap();
    std::fs::copy(
        debug
            .join(".build-id")
            .join(&id[..2])
            .join(format!("{}.debug", &id[2..])),
        wrong.join(format!("{}.debug", &other[2..])),
    )
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut p = ResolvedProfile {
        functions: vec![unnamed(&other, alpha), unnamed(&"11".repeat(20), alpha)],
        ..Default::default()
    };
    let named = name_functions(
        &mut p,
        &[SymbolSource::Dir(debug), SymbolSource::Debuginfod(closed)],
    )
    .await
    .unwrap();
    assert_eq!((named.named, named.unnamed), (0, 2));
    assert_eq!(named.missing.len(), 2);
    let (_, why) = named.missing.iter().find(|(b, _)| *b == other).unwrap();
    let why = why.to_string();
    assert!(why.contains(&format!("has build id {id}")), "{why}");
    assert!(why.contains("/buildid/"), "{why}");
    assert!(p.functions.iter().all(|f| f.origin.is_some()));
}

#[test]
fn symbol_sources_are_urls_or_directories() {
    assert_eq!(
        parse_symbol_source("https://debuginfod.debian.net/").unwrap(),
        SymbolSource::Debuginfod("https://debuginfod.debian.net".into())
    );
    let dir = std::env::temp_dir();
    assert_eq!(
        parse_symbol_source(dir.to_str().unwrap()).unwrap(),
        SymbolSource::Dir(dir)
    );
    let err = parse_symbol_source("/no/such/dir").unwrap_err().to_string();
    assert!(err.contains("neither an http(s):// URL"), "{err}");
}
