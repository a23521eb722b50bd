//! Tests of a module's DWARF relocated to its sections' addresses, against
//! binutils' addr2line on a relocatable object built like a `.ko` (two code
//! sections, a function in each at section offset 0, one with an inlined
//! callee), and of finding the file through a sysfs laid out like the
//! kernel's.
use super::*;
use crate::process::symbolize::tests::{run, scratch};
use std::process::Command;

const SOURCE: &str = r#"
static inline __attribute__((always_inline)) int leaf(int x) { return x * 3 + (x >> 2); }
__attribute__((noinline)) int demo_hot(int x) {
    int s = 0;
    for (int i = 0; i < x; i++)
        s += leaf(x + i);
    return s;
}
__attribute__((noinline, section(".text.unlikely"))) int demo_cold(int x) {
    return leaf(x) ^ 7;
}
"#;

/// Where the test's "kernel" put the module's code sections.
const TEXT: u64 = 0xffff_ffff_c010_0000;
const UNLIKELY: u64 = 0xffff_ffff_c020_0000;

fn bases() -> Bases {
    Bases::from([(".text".into(), TEXT), (".text.unlikely".into(), UNLIKELY)])
}

/// A module file built as the kernel's build links one (`ld -r` with a
/// build id), in `dir`.
fn module(dir: &Path) -> PathBuf {
    let src = dir.join("demo.c");
    std::fs::write(&src, SOURCE).unwrap();
    let obj = dir.join("demo.o");
    run(Command::new("cc")
        .args(["-c", "-g", "-O2", "-o"])
        .arg(&obj)
        .arg(&src));
    let ko = dir.join("demo.ko");
    run(Command::new("ld")
        .args(["-r", "--build-id=sha1", "-o"])
        .arg(&ko)
        .arg(&obj));
    ko
}

/// Size of `section` of the ELF file at `path`.
fn section_size(path: &Path, section: &str) -> u64 {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.section_by_name(section).unwrap().size()
}

/// The GNU build id of the ELF file at `path`, as the kernel gives it.
fn build_id(path: &Path) -> Vec<u8> {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.build_id().unwrap().unwrap().to_vec()
}

/// binutils' frames at `offset` of `section`: (function, file, line),
/// innermost first.
fn addr2line(ko: &Path, section: &str, offset: u64) -> Vec<(String, String, u32)> {
    let out = Command::new("addr2line")
        .args(["-f", "-i", "-e"])
        .arg(ko)
        .args(["-j", section, &format!("{offset:#x}")])
        .output()
        .expect("binutils' addr2line");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .map(|pair| {
            let (file, line) = pair[1].rsplit_once(':').unwrap();
            let line = line.split_whitespace().next().unwrap().parse().unwrap_or(0);
            (pair[0].to_string(), file.to_string(), line)
        })
        .collect()
}

fn ours(frames: &[Frame]) -> Vec<(String, String, u32)> {
    frames
        .iter()
        .map(|f| {
            let file = f.file.as_deref().unwrap_or("??").to_string();
            (f.func.name.clone(), file, f.line)
        })
        .collect()
}

/// Every byte of both code sections, named at the address the kernel put
/// it at, gives binutils' frames for its section offset: the sections'
/// own offsets overlap (both functions start at 0), so only the
/// relocation to their bases tells them apart.
#[test]
fn a_modules_code_is_named_at_the_addresses_it_was_loaded_at() {
    let dir = scratch("kmod-frames");
    let ko = module(&dir);
    let debug = ModuleDebug::parse(&std::fs::read(&ko).unwrap(), &bases(), u64::MAX).unwrap();
    assert!(debug.bytes() > 0);
    let mut inlined = 0;
    for (section, base) in [(".text", TEXT), (".text.unlikely", UNLIKELY)] {
        for offset in 0..section_size(&ko, section) {
            let want = addr2line(&ko, section, offset);
            let got = debug.frames(base + offset, "[kernel.demo]");
            if want.iter().all(|(name, _, _)| name == "??") {
                assert_eq!(got, None, "{section}+{offset:#x}");
                continue;
            }
            let got = got.unwrap_or_else(|| panic!("{section}+{offset:#x}: no frames"));
            assert_eq!(ours(&got), want, "{section}+{offset:#x}");
            assert!(got
                .iter()
                .all(|f| f.func.module == "[kernel.demo]" && f.named));
            let last = got.len() - 1;
            assert!(got[..last].iter().all(|f| f.func.inlined) && !got[last].func.inlined);
            inlined += usize::from(got.len() > 1);
        }
    }
    assert!(inlined > 0, "no address had the inlined leaf");
    assert_eq!(
        debug.frames(TEXT, "m").unwrap().last().unwrap().func.name,
        "demo_hot"
    );
    assert_eq!(
        debug
            .frames(UNLIKELY, "m")
            .unwrap()
            .last()
            .unwrap()
            .func
            .name,
        "demo_cold"
    );
    assert_eq!(debug.frames(TEXT - 0x1000, "m"), None);
}

/// A sysfs like the kernel's for a module `name` loaded at [`bases`],
/// with the build id `id`; `bases` of 0 as an unprivileged reader sees
/// them.
fn sysfs(root: &Path, name: &str, id: &[u8], hidden: bool) -> PathBuf {
    let module = root.join("sys/module").join(name);
    std::fs::create_dir_all(module.join("sections")).unwrap();
    std::fs::create_dir_all(module.join("notes")).unwrap();
    for (section, addr) in bases() {
        let addr = if hidden { 0 } else { addr };
        std::fs::write(
            module.join("sections").join(section),
            format!("{addr:#018x}\n"),
        )
        .unwrap();
    }
    let mut note = Vec::new();
    note.extend_from_slice(&4u32.to_le_bytes());
    note.extend_from_slice(&(id.len() as u32).to_le_bytes());
    note.extend_from_slice(&3u32.to_le_bytes());
    note.extend_from_slice(b"GNU\0");
    note.extend_from_slice(id);
    std::fs::write(module.join("notes/.note.gnu.build-id"), note).unwrap();
    root.join("sys")
}

fn by_build_id(dir: &Path, id: &[u8]) -> PathBuf {
    let hex = build_id_hex(id);
    let at = dir.join(".build-id").join(&hex[..2]);
    std::fs::create_dir_all(&at).unwrap();
    at.join(format!("{}.debug", &hex[2..]))
}

fn outer_name(opened: Opened<'_>, addr: u64) -> Option<String> {
    let debug = match opened {
        Opened::Held(d) | Opened::New(d) => d,
        Opened::Absent(_) => return None,
    };
    Some(debug.frames(addr, "m")?.last()?.func.name.clone())
}

/// The file is found by the build id the kernel gives, and kept; a module
/// without one is remembered as such until a file of its build id
/// arrives.
#[test]
fn a_modules_file_is_found_by_its_build_id_and_looked_for_again_when_one_arrives() {
    let dir = scratch("kmod-build-id");
    let ko = module(&dir);
    let id = build_id(&ko);
    let sys = sysfs(&dir, "demo", &id, false);
    let debug = dir.join("debug");
    let mut modules = Modules::new(sys, "6.1.0-test".into());
    let dirs = [debug.clone()];
    match modules.open("demo", &dirs, u64::MAX) {
        Opened::Absent(Some(asked)) => assert_eq!(asked, id),
        _ => panic!("found a file that is not there"),
    }
    assert!(matches!(
        modules.open("demo", &dirs, u64::MAX),
        Opened::Absent(None)
    ));
    std::fs::copy(&ko, by_build_id(&debug, &id)).unwrap();
    assert!(matches!(
        modules.open("demo", &dirs, u64::MAX),
        Opened::Absent(None)
    ));
    modules.arrived(&[id]);
    let opened = modules.open("demo", &dirs, u64::MAX);
    assert!(matches!(opened, Opened::New(_)));
    assert_eq!(
        outer_name(opened, UNLIKELY + 1).as_deref(),
        Some("demo_cold")
    );
    assert!(matches!(
        modules.open("demo", &dirs, u64::MAX),
        Opened::Held(_)
    ));
    modules.forget("demo");
    assert!(matches!(
        modules.open("demo", &dirs, u64::MAX),
        Opened::New(_)
    ));
}

/// By name under `lib/modules/RELEASE` (a `-` in the file where the
/// module's name has `_`), but never a file of another build, nor when
/// the kernel hides where the sections are, nor past the limit.
#[test]
fn a_modules_file_is_found_by_name_only_when_it_is_that_build() {
    let dir = scratch("kmod-by-name");
    let ko = module(&dir);
    let id = build_id(&ko);
    let debug = dir.join("debug");
    let at = debug.join("lib/modules/6.1.0-test/kernel/drivers/misc");
    std::fs::create_dir_all(&at).unwrap();
    std::fs::copy(&ko, at.join("demo-mod.ko")).unwrap();
    let dirs = [debug];

    let mut modules = Modules::new(sysfs(&dir, "demo_mod", &id, false), "6.1.0-test".into());
    let opened = modules.open("demo_mod", &dirs, u64::MAX);
    assert_eq!(outer_name(opened, TEXT + 4).as_deref(), Some("demo_hot"));

    let other = scratch("kmod-other-build");
    let mut modules = Modules::new(
        sysfs(&other, "demo_mod", &[7; 20], false),
        "6.1.0-test".into(),
    );
    assert!(matches!(
        modules.open("demo_mod", &dirs, u64::MAX),
        Opened::Absent(Some(_))
    ));

    let hidden = scratch("kmod-hidden");
    let mut modules = Modules::new(sysfs(&hidden, "demo_mod", &id, true), "6.1.0-test".into());
    assert!(matches!(
        modules.open("demo_mod", &dirs, u64::MAX),
        Opened::Absent(_)
    ));

    let small = scratch("kmod-limit");
    let mut modules = Modules::new(sysfs(&small, "demo_mod", &id, false), "6.1.0-test".into());
    assert!(matches!(
        modules.open("demo_mod", &dirs, 100),
        Opened::Absent(_)
    ));
    for d in [dir, other, hidden, small] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The symbolizer names a module's address with the functions inlined
/// there and their lines, in the module's `[kernel.NAME]`; a module
/// without debug information keeps its kallsyms name, and so does every
/// module when the host names nothing (`symbols.on_host = false`).
#[test]
fn the_symbolizer_names_a_modules_code_from_its_debug_information() {
    use super::super::blaze::Worker;
    use super::super::kallsyms::Kallsyms;
    use crate::process::maps::ProcessMaps;
    let dir = scratch("kmod-worker");
    let ko = module(&dir);
    let id = build_id(&ko);
    let debug = dir.join("debug");
    std::fs::copy(&ko, by_build_id(&debug, &id)).unwrap();
    let other = UNLIKELY + 0x1000;
    let text = format!(
        "ffffffff81000000 T _stext\n{TEXT:016x} t demo_hot\t[demo]\n\
         {UNLIKELY:016x} t demo_cold\t[demo]\n{other:016x} t other_fn\t[other]\n"
    );
    let inlined = (0..section_size(&ko, ".text"))
        .find(|&off| addr2line(&ko, ".text", off).len() == 2)
        .expect("an address with the inlined leaf");
    let want = addr2line(&ko, ".text", inlined);
    let worker = |naming| {
        let kallsyms = Kallsyms::parse(text.as_bytes()).unwrap();
        let modules = Modules::new(sysfs(&dir, "demo", &id, false), "6.1.0-test".into());
        let mut worker = Worker::new(vec![debug.clone()]).with_kernel(kallsyms, modules);
        worker.naming = naming;
        worker
    };

    let named = worker(super::super::Naming::OnHost)
        .symbolize(&ProcessMaps::default(), &[TEXT + inlined, other + 1]);
    assert_eq!(ours(&named[0]), want);
    assert_eq!(
        named[0]
            .iter()
            .map(|f| (f.func.module.as_str(), f.func.inlined))
            .collect::<Vec<_>>(),
        [("[kernel.demo]", true), ("[kernel.demo]", false)]
    );
    assert_eq!(named[1], vec![Frame::named("other_fn", "[kernel.other]")]);

    let off_host =
        worker(super::super::Naming::OffHost).symbolize(&ProcessMaps::default(), &[TEXT + inlined]);
    assert_eq!(off_host[0], vec![Frame::named("demo_hot", "[kernel.demo]")]);
    let _ = std::fs::remove_dir_all(dir);
}
