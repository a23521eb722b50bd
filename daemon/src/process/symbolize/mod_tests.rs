//! Tests of the blazesym symbolizer on real binaries: the test binary itself,
//! and small C and Rust programs built here (inlining, demangling, split
//! debug files, deleted binaries, other mount namespaces, perf maps).
use super::blaze::IDLE;
use super::*;
use crate::os::file_version::FileVersion;
use crate::process::maps::{Backing, Mapping};
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Endianness, Object, ObjectSection, ObjectSymbol};
use profd_common::model::Origin;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[inline(never)]
fn a_function_with_a_unique_name() -> usize {
    std::hint::black_box(42)
}

/// A fresh scratch directory for one test.
pub(super) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("profd-sym-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(super) fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compile C `source` in `dir` with `flags`.
pub(super) fn cc(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    run(Command::new("cc").args(flags).arg("-o").arg(&out).arg(&src));
    out
}

/// File offset and size of the symbol `name` in the ELF file at `path`.
pub(super) fn symbol(path: &Path, name: &str) -> (u64, u64) {
    let data = std::fs::read(path).unwrap();
    let elf = ElfFile64::<Endianness>::parse(&*data).unwrap();
    let sym = elf
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name} in {}", path.display()));
    let endian = elf.endian();
    let off = elf
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .find(|p| {
            let v = p.p_vaddr(endian);
            v <= sym.address() && sym.address() < v + p.p_filesz(endian)
        })
        .map(|p| sym.address() - p.p_vaddr(endian) + p.p_offset(endian))
        .expect("symbol in a loaded segment");
    (off, sym.size())
}

/// The GNU build id of the ELF file at `path`, in hex (as `object`
/// reads it, from the program's notes).
fn build_id_of(path: &Path) -> String {
    let data = std::fs::read(path).unwrap();
    let elf = ElfFile64::<Endianness>::parse(&*data).unwrap();
    let id = elf.build_id().unwrap().expect("a build id");
    crate::process::maps::build_id_hex(id)
}

/// The address (as in the ELF file) of the symbol `name`.
fn symbol_address(path: &Path, name: &str) -> u64 {
    let data = std::fs::read(path).unwrap();
    let elf = ElfFile64::<Endianness>::parse(&*data).unwrap();
    let sym = elf.symbols().find(|s| s.name() == Ok(name)).unwrap();
    sym.address()
}

/// Maps with `path` mapped whole at a fixed address (no target process).
pub(super) const BASE: u64 = 0x5500_0000_0000;
pub(super) fn mapped(path: &Path) -> ProcessMaps {
    let len = std::fs::metadata(path).unwrap().len();
    let mut maps = ProcessMaps::default();
    maps.insert(Mapping::new(
        BASE,
        BASE + len.next_multiple_of(4096),
        0,
        Backing::File(Arc::new(path.to_path_buf())),
    ));
    maps
}

/// The address `file_offset` of the file named `module` is mapped at.
fn address_of(maps: &ProcessMaps, module: &str, file_offset: u64) -> u64 {
    maps.iter()
        .find(|m| {
            m.module() == module
                && m.pgoff <= file_offset
                && file_offset < m.pgoff + (m.end - m.start)
        })
        .map(|m| m.start + file_offset - m.pgoff)
        .unwrap_or_else(|| panic!("{module}+{file_offset:#x} is not mapped: {maps:?}"))
}

/// A child process, killed when the test ends (passing or not).
struct Running(Child);

impl Running {
    fn id(&self) -> u32 {
        self.0.id()
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Start a program and wait until its binary `exe_name` and libc are mapped.
fn spawn(cmd: &mut Command, exe_name: &str) -> Running {
    let child = Running(cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}")));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let maps =
            std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap_or_default();
        if maps.contains(&format!("/{exe_name}\n")) && maps.contains("libc") {
            std::thread::sleep(Duration::from_millis(20));
            return child;
        }
        assert!(Instant::now() < deadline, "{exe_name} did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

const SPIN: &str = r#"
__attribute__((noinline)) void spin_forever(void) { for (;;) __asm__ volatile(""); }
int main(void) { spin_forever(); }
"#;

#[test]
fn names_own_function_and_keeps_unknowns() {
    let maps = ProcessMaps::read(std::process::id()).expect("maps");
    let f = a_function_with_a_unique_name as fn() -> usize as usize as u64;
    // Room for this test binary's debug information, hundreds of MiB.
    let mut worker = blaze::Worker::with_budget(Vec::new(), Budget::of(16 << 30));
    let frames = worker.symbolize(&maps, &[f, 0x10]);
    assert_eq!(frames.len(), 2);
    let own = &frames[0][0];
    // Demangled, without the legacy `::h<hash>`, with its source position.
    assert_eq!(
        own.func.name,
        "profd::process::symbolize::tests::a_function_with_a_unique_name"
    );
    assert!(own.named && !own.func.inlined);
    assert!(own
        .file
        .as_deref()
        .unwrap()
        .ends_with("symbolize/mod_tests.rs"));
    assert_eq!(frames[1], vec![Frame::unknown(0x10)]);
    assert!(!frames[1][0].named);
}

#[test]
fn rust_symbols_demangle_in_both_manglings() {
    let dir = scratch("rust");
    let src = dir.join("m.rs");
    std::fs::write(
        &src,
        "mod inner { #[inline(never)] pub fn spin_here(n: u64) -> u64 { let mut x = n; \
         for i in 0..n { x = x.wrapping_mul(31).wrapping_add(i); } x } }\n\
         fn main() { println!(\"{}\", inner::spin_here(std::hint::black_box(10))); }\n",
    )
    .unwrap();
    let sym = BlazeSymbolizer::default();
    for mangling in ["legacy", "v0"] {
        let out = dir.join(mangling);
        // No DWARF: names come from the ELF symbol table, mangled.
        let mut rustc = Command::new("rustc");
        rustc.args(["-O", "-C", "strip=debuginfo"]);
        if mangling == "v0" {
            rustc.args(["-C", "symbol-mangling-version=v0"]); // legacy is the default
        }
        run(rustc.arg("-o").arg(&out).arg(&src));
        let data = std::fs::read(&out).unwrap();
        let elf = ElfFile64::<Endianness>::parse(&*data).unwrap();
        let mangled = elf
            .symbols()
            .filter_map(|s| s.name().ok())
            .find(|n| n.contains("spin_here"))
            .unwrap()
            .to_string();
        let (off, _) = symbol(&out, &mangled);
        let frames = sym.symbolize(&mapped(&out), &[BASE + off]);
        assert_eq!(frames[0][0].func.name, "m::inner::spin_here", "{mangled}");
        assert_eq!(frames[0][0].func.module, mangling);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cpp_symbols_demangle() {
    // A C function under a C++ mangled name: no C++ compiler needed.
    let dir = scratch("cpp");
    let prog = cc(
        &dir,
        "cpp",
        "__attribute__((noinline)) int twice(int x) __asm__(\"_ZN2ns5twiceEi\");\n\
         int twice(int x) { return 2 * x; }\n\
         int main(int argc, char **argv) { return twice(argc); }\n",
        &["-O2"],
    );
    let (off, _) = symbol(&prog, "_ZN2ns5twiceEi");
    let frames = BlazeSymbolizer::default().symbolize(&mapped(&prog), &[BASE + off]);
    assert_eq!(frames[0][0].func.name, "ns::twice(int)");
    std::fs::remove_dir_all(&dir).unwrap();
}

pub(super) const INLINED: &str = r#"volatile unsigned long sink;
static inline __attribute__((always_inline)) void hot_inline(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		sink += i * 2654435761u; /* line 5 */
}
__attribute__((noinline)) void outer(unsigned long n)
{
	hot_inline(3 * n); /* line 9 */
	for (unsigned long i = 0; i < n; i++)
		sink += i;
}
int main(int argc, char **argv) { outer(argc * 1000UL); return 0; }
"#;

#[test]
fn inlined_code_is_its_own_frame_with_lines() {
    let dir = scratch("inline");
    let prog = cc(&dir, "inl", INLINED, &["-O2", "-g"]);
    let (off, size) = symbol(&prog, "outer");
    let addrs: Vec<u64> = (off..off + size).map(|o| BASE + o).collect();
    let frames = BlazeSymbolizer::default().symbolize(&mapped(&prog), &addrs);
    let chain = frames
        .iter()
        .find(|f| f.len() == 2 && f[0].line == 5)
        .unwrap_or_else(|| panic!("no inlined frame in outer: {frames:#?}"));
    assert_eq!(
        (chain[0].func.name.as_str(), chain[0].func.inlined),
        ("hot_inline", true)
    );
    assert_eq!(
        (chain[1].func.name.as_str(), chain[1].func.inlined),
        ("outer", false)
    );
    assert_eq!(chain[1].line, 9, "the caller's frame is at the call");
    assert!(chain[0].file.as_deref().unwrap().ends_with("inl.c"));
    assert!(chain.iter().all(|f| f.named && f.func.module == "inl"));
    // outer's own code is a single frame.
    assert!(frames
        .iter()
        .any(|f| f.len() == 1 && f[0].func.name == "outer"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file whose debug information weighs more than half the budget for
/// parsed files is named from its symbols alone (no inlined frame, no
/// line), and counted; with room for it, the same address gets both.
#[test]
fn debug_information_too_big_for_the_budget_is_left_unread() {
    let dir = scratch("symbols-only");
    let prog = cc(&dir, "inl", INLINED, &["-O2", "-g"]);
    let weight = blaze::resident_estimate_of(&prog);
    assert!(weight.debug > 0 && weight.symbols > 0, "{weight:?}");
    let (off, size) = symbol(&prog, "outer");
    let addrs: Vec<u64> = (off..off + size).map(|o| BASE + o).collect();
    let name = |parsed: u64| {
        let budget = Budget {
            names: 0,
            plt: 0,
            fdes: 0,
            parsed,
        };
        let mut worker = blaze::Worker::with_budget(Vec::new(), budget);
        worker.symbolize(&mapped(&prog), &addrs)
    };
    let roomy = name(2 * weight.with_debug());
    assert!(
        roomy.iter().any(|f| f.len() == 2 && f[0].line == 5),
        "with room, the inlined frame and its line: {roomy:#?}"
    );
    let before = stats()
        .symbols_only
        .load(std::sync::atomic::Ordering::Relaxed);
    let tight = name(2 * weight.symbols + weight.debug);
    for frames in &tight {
        assert_eq!(frames.len(), 1, "no inlined frame: {frames:#?}");
        assert_eq!(frames[0].func.name, "outer");
        assert_eq!((frames[0].line, frames[0].file.is_none()), (0, true));
    }
    assert!(
        stats()
            .symbols_only
            .load(std::sync::atomic::Ordering::Relaxed)
            > before
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stripped_binaries_use_build_id_debug_files_else_unwind_entries() {
    let dir = scratch("split");
    let prog = cc(&dir, "split", INLINED, &["-O2", "-g", "-Wl,--build-id"]);
    let (off, size) = symbol(&prog, "outer");
    let start = symbol_address(&prog, "outer");
    let hex = build_id_of(&prog);
    let debug_dir = dir.join("debug");
    let by_id = debug_dir.join(".build-id").join(&hex[..2]);
    std::fs::create_dir_all(&by_id).unwrap();
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&prog)
        .arg(by_id.join(format!("{}.debug", &hex[2..]))));
    run(Command::new("strip").arg("--strip-all").arg(&prog));

    let frames =
        BlazeSymbolizer::with_debug_dirs(vec![debug_dir]).symbolize(&mapped(&prog), &[BASE + off]);
    let f = &frames[0];
    assert_eq!(f.last().unwrap().func.name, "outer", "{f:?}");
    assert!(f.last().unwrap().named);
    assert!(f[0].file.as_deref().unwrap().ends_with("split.c"));

    // Without the debug file, every address of `outer` is one frame: the
    // function its unwind entry covers, named by the address it starts at.
    let frames = BlazeSymbolizer::with_debug_dirs(vec![dir.join("nowhere")])
        .symbolize(&mapped(&prog), &[BASE + off, BASE + off + size / 2]);
    let origin = Origin {
        build_id: hex.clone(),
        address: start,
    };
    let grouped = Frame::unnamed_in(format!("split!{start:#x}"), "split", origin);
    assert_eq!(frames, vec![vec![grouped.clone()], vec![grouped]]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Stripped code that no unwind entry covers (assembly without CFI) is
/// one frame per instruction, named by the instruction's address and kept
/// with its origin, so that a debug file names it off the host as it does
/// grouped code.
#[test]
fn stripped_code_without_unwind_entries_keeps_its_addresses() {
    let dir = scratch("nocfi");
    let source = "__asm__(\".text\\n.globl nocfi\\n.type nocfi, @function\\n\
                  nocfi:\\n nop\\n nop\\n nop\\n ret\\n.size nocfi, .-nocfi\\n\");\n\
                  void nocfi(void);\n\
                  int main(void) { nocfi(); return 0; }\n";
    let prog = cc(&dir, "nocfi", source, &["-O2", "-Wl,--build-id"]);
    let (off, _) = symbol(&prog, "nocfi");
    let start = symbol_address(&prog, "nocfi");
    let id = build_id_of(&prog);
    run(Command::new("strip").arg("--strip-all").arg(&prog));
    let frames = BlazeSymbolizer::with_debug_dirs(vec![dir.join("nowhere")])
        .symbolize(&mapped(&prog), &[BASE + off + 1, BASE + off + 2]);
    let at = |address: u64| {
        let origin = Origin {
            build_id: id.clone(),
            address,
        };
        vec![Frame::unnamed_in(
            format!("nocfi!{address:#x}"),
            "nocfi",
            origin,
        )]
    };
    assert_eq!(frames, vec![at(start + 1), at(start + 2)]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Off the host (`symbols.on_host = false`), a binary's symbols and DWARF
/// are not read: its code is grouped by function, with its build id and
/// address, as if it were stripped.
#[test]
fn off_the_host_code_is_grouped_though_it_has_symbols() {
    let dir = scratch("offhost");
    let prog = cc(&dir, "offhost", INLINED, &["-O2", "-g", "-Wl,--build-id"]);
    let (off, size) = symbol(&prog, "outer");
    let start = symbol_address(&prog, "outer");
    let id = build_id_of(&prog);
    let sym = BlazeSymbolizer::with_debuginfod(Vec::new(), None, Naming::OffHost);
    let frames = sym.symbolize(&mapped(&prog), &[BASE + off, BASE + off + size / 2]);
    let origin = Origin {
        build_id: id,
        address: start,
    };
    let grouped = Frame::unnamed_in(format!("offhost!{start:#x}"), "offhost", origin);
    assert_eq!(frames, vec![vec![grouped.clone()], vec![grouped]]);
    // On the host, the same address is named.
    let frames =
        BlazeSymbolizer::with_debug_dirs(Vec::new()).symbolize(&mapped(&prog), &[BASE + off]);
    assert_eq!(frames[0].last().unwrap().func.name, "outer");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stripped binary with MiniDebugInfo (`.gnu_debugdata`: its symbol
/// table, xz-compressed, as Fedora ships them) is named from it.
#[test]
fn stripped_binaries_are_named_from_their_minidebuginfo() {
    let dir = scratch("minidebuginfo");
    let prog = cc(&dir, "mini", INLINED, &["-O2", "-g"]);
    let (off, size) = symbol(&prog, "outer");
    let mini = dir.join("mini.symtab");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&prog)
        .arg(&mini));
    run(Command::new("objcopy").arg("--strip-debug").arg(&mini));
    run(Command::new("xz").arg("--keep").arg(&mini));
    run(Command::new("strip").arg("--strip-all").arg(&prog));
    run(Command::new("objcopy")
        .arg(format!(
            "--add-section=.gnu_debugdata={}",
            dir.join("mini.symtab.xz").display()
        ))
        .arg(&prog));
    let frames = BlazeSymbolizer::with_debug_dirs(vec![dir.join("nowhere")])
        .symbolize(&mapped(&prog), &[BASE + off + size / 2]);
    let f = frames[0].last().unwrap();
    assert_eq!(
        (f.func.name.as_str(), f.named),
        ("outer", true),
        "{frames:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn deleted_binary_stays_named_after_it_exits() {
    let dir = scratch("deleted");
    let prog = cc(&dir, "victim", SPIN, &["-O1"]);
    let (off, _) = symbol(&prog, "spin_forever");
    let mut child = spawn(&mut Command::new(&prog), "victim");
    let maps = ProcessMaps::read(child.id()).expect("maps");
    std::fs::remove_file(&prog).unwrap();
    let addr = address_of(&maps, "victim", off);
    let file = maps.find(addr).unwrap().file().expect("opened").clone();
    assert!(file.is_open(), "{file:?}");
    assert_eq!(file.path, prog);
    child.kill();

    let frames = BlazeSymbolizer::default().symbolize(&maps, &[addr]);
    assert_eq!(frames[0][0].func.name, "spin_forever");
    assert_eq!(frames[0][0].func.module, "victim");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn binaries_in_another_mount_namespace_resolve() {
    let dir = scratch("mntns");
    let prog = cc(&dir, "hidden", SPIN, &["-O1"]);
    let (off, _) = symbol(&prog, "spin_forever");
    let private = dir.join("private");
    std::fs::create_dir_all(&private).unwrap();
    // Inside its own mount namespace the program runs from a tmpfs that
    // profd's namespace does not see.
    let script = format!(
        "mount -t tmpfs none {p} && cp {prog} {p}/hidden && exec {p}/hidden",
        p = private.display(),
        prog = prog.display()
    );
    let mut child = spawn(
        Command::new("unshare").args(["-m", "--propagation", "private", "sh", "-c", &script]),
        "hidden",
    );
    let maps = ProcessMaps::read(child.id()).expect("maps");
    let target = maps.target().unwrap().clone();
    assert!(!target.same_mounts);
    let inside = private.join("hidden");
    assert!(!inside.exists(), "profd must not see the target's tmpfs");
    assert!(target.in_root(&inside).exists());
    let addr = address_of(&maps, "hidden", off);
    let frames = BlazeSymbolizer::default().symbolize(&maps, &[addr]);
    child.kill();
    assert_eq!(frames[0][0].func.name, "spin_forever");
    let frames = BlazeSymbolizer::default().symbolize(&maps, &[addr]);
    assert_eq!(frames[0][0].func.name, "spin_forever", "after exit");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn anonymous_code_is_named_from_the_perf_map() {
    let pid = std::process::id();
    let perf_map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    std::fs::write(
        &perf_map,
        "7e0000001000 40 jit_compiled_fn\n7e0000009000 8 stray\n",
    )
    .unwrap();
    let mut maps = ProcessMaps::default();
    maps.insert(Mapping::new(
        0x7e00_0000_0000,
        0x7e00_0001_0000,
        0,
        Backing::Special("[anon]".into()),
    ));
    maps.resolve_new(pid);
    let addrs = [0x7e00_0000_1010, 0x7e00_0000_2000, 0x7e00_0000_9004];
    let frames = BlazeSymbolizer::default().symbolize(&maps, &addrs);
    std::fs::remove_file(&perf_map).unwrap();
    assert_eq!(frames[0], vec![Frame::named("jit_compiled_fn", "[jit]")]);
    assert_eq!(
        frames[1],
        vec![Frame::unnamed("[anon]+0x2000".into(), "[anon]")]
    );
    assert_eq!(frames[2], vec![Frame::named("stray", "[jit]")]);
    // The file is gone; the table read (and the file held) still serve.
    let frames = BlazeSymbolizer::default().symbolize(&maps, &addrs[..1]);
    assert_eq!(frames[0][0].func.name, "jit_compiled_fn");
}

#[test]
fn idle_sources_are_released_and_parsed_again_when_needed() {
    let dir = scratch("evict");
    let prog = cc(&dir, "evict", INLINED, &["-O2", "-g"]);
    let (off, _) = symbol(&prog, "outer");
    let kernel = std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_suffix(" T vfs_read"))
        .and_then(|a| u64::from_str_radix(a, 16).ok())
        .filter(|&a| a != 0)
        .expect("vfs_read's address in /proc/kallsyms (run as root)");
    let (maps, addrs) = (mapped(&prog), [BASE + off, kernel]);
    let mut worker = blaze::Worker::new(Vec::new());
    let first = worker.symbolize(&maps, &addrs);
    assert_eq!(first[0].last().unwrap().func.name, "outer");
    assert_eq!(first[1][0].func.name, "vfs_read");
    let now = Instant::now();
    assert!(!worker.tick(now, Tidy::AsUsual), "just used");
    assert!(
        worker.tick(now + IDLE, Tidy::AsUsual),
        "the file and kallsyms"
    );
    assert!(!worker.tick(now + IDLE, Tidy::AsUsual), "nothing left");
    assert_eq!(worker.symbolize(&maps, &addrs), first);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn names_are_shared_by_processes_and_outlive_the_parsed_files() {
    let dir = scratch("names");
    let prog = cc(&dir, "names", INLINED, &["-O2", "-g"]);
    let (off, _) = symbol(&prog, "outer");
    let mut worker = blaze::Worker::new(Vec::new());
    let first = worker.symbolize(&mapped(&prog), &[BASE + off]);
    assert_eq!(first[0].last().unwrap().func.name, "outer");
    let now = Instant::now();
    assert!(
        worker.tick(now + IDLE, Tidy::AsUsual),
        "the file's data released"
    );

    // Another process maps the same file elsewhere: named without parsing.
    let base = BASE + 0x100_0000;
    let len = std::fs::metadata(&prog).unwrap().len();
    let mut other = ProcessMaps::default();
    other.insert(Mapping::new(
        base,
        base + len.next_multiple_of(4096),
        0,
        Backing::File(Arc::new(prog.clone())),
    ));
    assert_eq!(worker.symbolize(&other, &[base + off]), first);
    assert!(
        !worker.tick(Instant::now() + IDLE, Tidy::AsUsual),
        "nothing parsed"
    );

    // A file rewritten in place is another file: parsed again.
    let file = std::fs::File::options().write(true).open(&prog).unwrap();
    file.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    assert_eq!(worker.symbolize(&other, &[base + off]), first);
    assert!(
        worker.tick(Instant::now() + IDLE, Tidy::AsUsual),
        "parsed again"
    );

    // Names unused for long go too.
    worker.tick(Instant::now() + names::NAMES_IDLE, Tidy::AsUsual);
    assert_eq!(worker.symbolize(&other, &[base + off]), first);
    assert!(
        worker.tick(Instant::now() + IDLE, Tidy::AsUsual),
        "parsed again"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Parsed files stay within their share of the budget, the least recently
/// used let go of first; a file let go of and named again gives the same
/// names; one larger than the budget is named from its symbols alone and let go
/// of once named.
#[test]
fn parsed_files_stay_within_the_budget_those_used_most_kept() {
    let dir = scratch("budget");
    let progs: Vec<PathBuf> = ["-O0", "-O1", "-O2"]
        .iter()
        .enumerate()
        .map(|(i, opt)| cc(&dir, &format!("p{i}"), INLINED, &[opt, "-g"]))
        .collect();
    let weights: Vec<u64> = progs
        .iter()
        .map(|p| blaze::resident_estimate_of(p).with_debug())
        .collect();
    assert!(weights.iter().all(|&w| w > 0));
    // Room for two of the three files; no names kept, so each naming
    // reads its file.
    let parsed = weights.iter().sum::<u64>() - weights.iter().min().unwrap();
    let budget = Budget {
        names: 0,
        plt: 0,
        fdes: 0,
        parsed,
    };
    let mut worker = blaze::Worker::with_budget(Vec::new(), budget);
    let name = |worker: &mut blaze::Worker, i: usize| {
        let (off, _) = symbol(&progs[i], "outer");
        let frames = worker.symbolize(&mapped(&progs[i]), &[BASE + off]);
        assert_eq!(frames[0].last().unwrap().func.name, "outer");
        let (_, bytes) = worker.held();
        assert!(bytes <= parsed, "{bytes} held over a budget of {parsed}");
        assert_eq!(worker.names_bytes(), 0);
        frames
    };
    let held = |worker: &blaze::Worker| -> Vec<PathBuf> {
        worker
            .held()
            .0
            .into_iter()
            .map(|h| {
                progs
                    .iter()
                    .find(|p| blaze::Held::File(FileVersion::at(p).unwrap()) == h)
                    .expect("one of the programs")
                    .clone()
            })
            .collect()
    };
    let first = name(&mut worker, 0);
    name(&mut worker, 0);
    name(&mut worker, 1);
    assert_eq!(held(&worker), [progs[0].clone(), progs[1].clone()]);
    name(&mut worker, 2);
    assert_eq!(
        held(&worker),
        [progs[0].clone(), progs[1].clone()],
        "a newcomer used no more than those held went"
    );
    name(&mut worker, 2);
    assert_eq!(
        held(&worker),
        [progs[0].clone(), progs[2].clone()],
        "used again, it took the place of the one used least"
    );
    assert_eq!(name(&mut worker, 0), first, "named the same");
    assert_eq!(held(&worker), [progs[2].clone(), progs[0].clone()]);

    // A budget smaller than any file: nothing stays parsed, each file is
    // named from its symbols alone.
    let tiny = Budget {
        names: 0,
        plt: 0,
        fdes: 0,
        parsed: 1,
    };
    let mut worker = blaze::Worker::with_budget(Vec::new(), tiny);
    let (off, _) = symbol(&progs[0], "outer");
    let named = worker.symbolize(&mapped(&progs[0]), &[BASE + off]);
    assert_eq!(named[0].len(), 1);
    assert_eq!(named[0][0].func, first[0].last().unwrap().func);
    assert_eq!((named[0][0].line, named[0][0].file.is_none()), (0, true));
    assert_eq!(worker.held(), (Vec::new(), 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A shed request lets go of every parsed file at the next tick.
#[test]
fn shedding_releases_the_parsed_files() {
    let dir = scratch("shed");
    let prog = cc(&dir, "shed", INLINED, &["-O2", "-g"]);
    let (off, _) = symbol(&prog, "outer");
    let mut worker = blaze::Worker::with_budget(Vec::new(), Budget::of(DEFAULT_BUDGET));
    let first = worker.symbolize(&mapped(&prog), &[BASE + off]);
    assert!(worker.held().1 > 0);
    assert!(worker.tick(Instant::now(), Tidy::Shed));
    assert_eq!(worker.held(), (Vec::new(), 0));
    assert_eq!(worker.symbolize(&mapped(&prog), &[BASE + off]), first);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two paths to one file (two processes' descriptors of it) hold one
/// parsed copy, weighed once.
#[test]
fn paths_to_one_file_hold_one_parsed_copy() {
    let dir = scratch("paths");
    let prog = cc(&dir, "paths", INLINED, &["-O2", "-g"]);
    let link = dir.join("link");
    std::os::unix::fs::symlink(&prog, &link).unwrap();
    let (off, _) = symbol(&prog, "outer");
    let budget = Budget {
        names: 0,
        plt: 0,
        fdes: 0,
        parsed: u64::MAX / 2,
    };
    let mut worker = blaze::Worker::with_budget(Vec::new(), budget);
    let first = worker.symbolize(&mapped(&prog), &[BASE + off]);
    let once = worker.held();
    let again = worker.symbolize(&mapped(&link), &[BASE + off]);
    let strip = |f: &Frame| (f.func.name.clone(), f.file.clone(), f.line);
    assert_eq!(strip(&again[0][0]), strip(&first[0][0]));
    assert_eq!(worker.held(), once);
    assert_eq!(once.0.len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A function named by its symbol alone names its other addresses from
/// the names kept, without parsing the file again; one with lines and
/// inlined code is named address by address.
#[test]
fn a_function_named_by_its_symbol_names_its_other_addresses_unparsed() {
    let dir = scratch("functions");
    let plain = cc(&dir, "plain", INLINED, &["-O1"]);
    let budget = Budget {
        names: 1 << 20,
        plt: 0,
        fdes: 0,
        parsed: 1,
    };
    let mut worker = blaze::Worker::with_budget(Vec::new(), budget);
    let (off, size) = symbol(&plain, "outer");
    assert!(size > 8, "outer is {size} bytes");
    let name = |worker: &mut blaze::Worker, at: u64| {
        let frames = worker.symbolize(&mapped(&plain), &[BASE + at]);
        frames[0].last().unwrap().func.name.clone()
    };
    assert_eq!(name(&mut worker, off), "outer");
    let names = worker.names_bytes();
    for at in [off + 1, off + size / 2, off + size - 1] {
        assert_eq!(name(&mut worker, at), "outer", "{at:#x}");
        assert_eq!(worker.names_bytes(), names, "named from the function kept");
    }
    assert_ne!(name(&mut worker, off + size), "outer");

    let lines = cc(&dir, "lines", INLINED, &["-O1", "-g"]);
    let (off, _) = symbol(&lines, "outer");
    let roomy = Budget {
        parsed: 1 << 30,
        ..budget
    };
    let mut worker = blaze::Worker::with_budget(Vec::new(), roomy);
    worker.symbolize(&mapped(&lines), &[BASE + off]);
    let one = worker.names_bytes();
    worker.symbolize(&mapped(&lines), &[BASE + off + 1]);
    assert!(worker.names_bytes() > one, "each address its own name");
}

/// Resident KiB of this process's mappings of `path` (smaps).
fn resident_kib_of(path: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        if let Some(rss) = line.strip_prefix("Rss:") {
            if ours {
                kib += rss
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap();
            }
        } else if line.split_ascii_whitespace().nth(5).is_some() || line.ends_with(' ') {
            ours = line.ends_with(path.to_str().unwrap());
        }
    }
    kib
}

/// A request that reads several files lets go of the pages each file's
/// parsing touched before it reads the next: when it returns, none of
/// them is resident (they stay in the page cache).
#[test]
fn a_request_holds_the_pages_of_one_new_file_at_a_time() {
    let dir = scratch("pages");
    let progs: Vec<PathBuf> = (0..3)
        .map(|n| cc(&dir, &format!("pages{n}"), INLINED, &["-O2", "-g"]))
        .collect();
    let mut maps = ProcessMaps::default();
    let mut addrs = Vec::new();
    for (n, prog) in progs.iter().enumerate() {
        let base = BASE + n as u64 * 0x100_0000;
        let len = std::fs::metadata(prog).unwrap().len();
        maps.insert(Mapping::new(
            base,
            base + len.next_multiple_of(4096),
            0,
            Backing::File(Arc::new(prog.clone())),
        ));
        addrs.push(base + symbol(prog, "outer").0);
    }
    let mut worker = blaze::Worker::new(Vec::new());
    let frames = worker.symbolize(&maps, &addrs);
    assert!(frames
        .iter()
        .all(|f| f.last().unwrap().func.name == "outer"));
    let resident: Vec<u64> = progs.iter().map(|p| resident_kib_of(p)).collect();
    assert_eq!(resident, [0, 0, 0], "KiB of each file still resident");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stripped system library (liblzma: no `.symtab`, no MiniDebugInfo)
/// names its exported functions from `.dynsym`, and groups the rest by
/// function: no address of it is a single instruction's row.
#[test]
fn a_stripped_system_library_names_its_exports_and_groups_the_rest() {
    let path = [
        "/lib/x86_64-linux-gnu/liblzma.so.5",
        "/usr/lib/x86_64-linux-gnu/liblzma.so.5",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.exists())
    .expect("liblzma.so.5 (xz-utils)");
    let data = std::fs::read(path).unwrap();
    let elf = ElfFile64::<Endianness>::parse(&*data).unwrap();
    assert!(
        elf.section_by_name(".symtab").is_none(),
        "liblzma is stripped"
    );
    let code = elf
        .dynamic_symbols()
        .find(|s| s.name() == Ok("lzma_code"))
        .expect("lzma_code exported");
    let text = elf.section_by_name(".text").unwrap();
    let to_off = |vaddr: u64| vaddr - text.address() + text.file_range().unwrap().0;
    let sym = BlazeSymbolizer::with_debug_dirs(vec![PathBuf::from("/nowhere")]);
    let maps = mapped(path);
    let exported = sym.symbolize(&maps, &[BASE + to_off(code.address() + 4)]);
    let f = exported[0].last().unwrap();
    assert_eq!((f.func.name.as_str(), f.named), ("lzma_code", true));
    // Addresses across .text are named or grouped by function, but for
    // the few that fall in the padding between functions (no FDE covers
    // it); the library's hidden functions are grouped.
    let (start, size) = (text.address(), text.size());
    let addrs: Vec<u64> = (1..200u64)
        .map(|k| BASE + to_off(start + size * k / 200))
        .collect();
    let frames = sym.symbolize(&maps, &addrs);
    let last = |f: &Vec<Frame>| f.last().unwrap().clone();
    let named = frames.iter().filter(|f| last(f).named).count();
    let grouped = frames
        .iter()
        .filter(|f| last(f).func.name.starts_with("liblzma.so.5!0x"))
        .count();
    assert!(
        named + grouped >= 185 && named >= 10 && grouped >= 50,
        "of 199 addresses, {named} named, {grouped} grouped: {frames:?}"
    );
}
