//! Naming raw addresses: the `Symbolizer` trait (so tests can use a fake) and
//! its blazesym implementation (ELF files by file offset, kernel from
//! kallsyms). Unnamed frames become `module+0xoffset` or `[unknown] 0xaddr`.
use crate::maps::{Backing, ProcessMaps};
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as Blazesym};
use blazesym::MaybeDefault;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A frame's function name and module.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FrameName {
    pub name: String,
    pub module: String,
}

/// Kernel text lives in the upper half of the address space.
pub fn is_kernel(addr: u64) -> bool {
    addr >= 0xffff_8000_0000_0000
}

/// Names addresses of one process (user ones through `maps`).
pub trait Symbolizer: Send + Sync {
    /// One name per address, in order; never fewer.
    fn symbolize(&self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<FrameName>;
}

type Request = (
    ProcessMaps,
    Vec<u64>,
    std::sync::mpsc::Sender<Vec<FrameName>>,
);

/// The blazesym-backed symbolizer, shared by all sessions. blazesym's
/// symbolizer (and its caches of parsed files, kept for the daemon's life)
/// is not `Send`, so it lives on its own thread and serves requests in turn.
pub struct BlazeSymbolizer {
    requests: Mutex<std::sync::mpsc::Sender<Request>>,
}

impl Default for BlazeSymbolizer {
    fn default() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("profd-symbolize".into())
            .spawn(move || {
                let sym = Blazesym::new();
                for (maps, addrs, reply) in rx {
                    let _ = reply.send(symbolize_with(&sym, &maps, &addrs));
                }
            })
            .expect("spawning the symbolizer thread");
        BlazeSymbolizer {
            requests: Mutex::new(tx),
        }
    }
}

fn unknown(addr: u64) -> FrameName {
    FrameName {
        name: format!("[unknown] {addr:#x}"),
        module: "[unknown]".into(),
    }
}

fn name_from(sym: Symbolized<'_>, module: &str, fallback: impl FnOnce() -> String) -> FrameName {
    match sym {
        Symbolized::Sym(s) => FrameName {
            name: s.name.into_owned(),
            module: module.to_string(),
        },
        Symbolized::Unknown(_) => FrameName {
            name: fallback(),
            module: module.to_string(),
        },
    }
}

impl Symbolizer for BlazeSymbolizer {
    fn symbolize(&self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<FrameName> {
        let (reply, answer) = std::sync::mpsc::channel();
        let sent = {
            let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner());
            requests.send((maps.clone(), addrs.to_vec(), reply)).is_ok()
        };
        match answer.recv() {
            Ok(names) if sent => names,
            _ => addrs.iter().map(|&a| unknown(a)).collect(),
        }
    }
}

fn symbolize_with(sym: &Blazesym, maps: &ProcessMaps, addrs: &[u64]) -> Vec<FrameName> {
    {
        let mut out: Vec<Option<FrameName>> = vec![None; addrs.len()];

        let kernel: Vec<usize> = (0..addrs.len()).filter(|&i| is_kernel(addrs[i])).collect();
        if !kernel.is_empty() {
            let src = Source::Kernel(Kernel {
                kallsyms: MaybeDefault::Default,
                vmlinux: MaybeDefault::None,
                ..Default::default()
            });
            let input: Vec<u64> = kernel.iter().map(|&i| addrs[i]).collect();
            match sym.symbolize(&src, Input::AbsAddr(&input)) {
                Ok(results) => {
                    for (&i, r) in kernel.iter().zip(results) {
                        let a = addrs[i];
                        out[i] = Some(name_from(r, "[kernel]", || format!("[kernel] {a:#x}")));
                    }
                }
                Err(err) => tracing::debug!(%err, "kernel symbolization failed"),
            }
        }

        // User addresses, grouped by the file that backs them.
        let mut by_file: HashMap<Arc<PathBuf>, Vec<(usize, u64)>> = HashMap::new();
        for (i, &addr) in addrs.iter().enumerate() {
            if is_kernel(addr) {
                continue;
            }
            match maps.find(addr) {
                Some(m) => match &m.backing {
                    Backing::File(path) => by_file
                        .entry(path.clone())
                        .or_default()
                        .push((i, m.file_offset(addr))),
                    Backing::Special(name) => {
                        out[i] = Some(FrameName {
                            name: format!("{name}+{:#x}", addr - m.start),
                            module: name.to_string(),
                        })
                    }
                },
                None => out[i] = Some(unknown(addr)),
            }
        }
        for (path, items) in by_file {
            let module = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string());
            let offsets: Vec<u64> = items.iter().map(|&(_, off)| off).collect();
            let src = Source::Elf(Elf::new(path.as_path()));
            let results = sym.symbolize(&src, Input::FileOffset(&offsets));
            match results {
                Ok(results) => {
                    for (&(i, off), r) in items.iter().zip(results) {
                        out[i] = Some(name_from(r, &module, || format!("{module}+{off:#x}")));
                    }
                }
                Err(err) => {
                    tracing::debug!(path = %path.display(), %err, "cannot read symbols");
                    for &(i, off) in &items {
                        out[i] = Some(FrameName {
                            name: format!("{module}+{off:#x}"),
                            module: module.clone(),
                        });
                    }
                }
            }
        }
        out.into_iter()
            .zip(addrs)
            .map(|(name, &addr)| name.unwrap_or_else(|| unknown(addr)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_with_a_unique_name() -> usize {
        std::hint::black_box(42)
    }

    #[test]
    fn names_own_function_and_keeps_unknowns() {
        let maps = ProcessMaps::read(std::process::id()).expect("maps");
        let f = a_function_with_a_unique_name as fn() -> usize as usize as u64;
        let names = BlazeSymbolizer::default().symbolize(&maps, &[f, 0x10]);
        assert_eq!(names.len(), 2);
        assert!(
            names[0].name.contains("a_function_with_a_unique_name"),
            "{:?}",
            names[0]
        );
        assert_eq!(names[1].name, "[unknown] 0x10");
    }
}
