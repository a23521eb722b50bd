//! Tests of the unwinder: walks over real binaries and stack copies, and
//! when unwind data is read.
use super::*;
use crate::process::maps::{Load, Segments};
use object::{Object, ObjectSection};

#[test]
fn go_code_is_unwound_by_its_function_table() {
    use crate::process::unwind::gopclntab::tests::{build, objdump};
    let exe = build("gostacks", &[]);
    let table = GoTable::of(&exe).unwrap();
    let entry = |name: &str| {
        table
            .funcs()
            .find(|f| f.name() == Some(name))
            .unwrap_or_else(|| panic!("{name}"))
            .entry
    };
    let text = *table.loads.0.iter().find(|l| l.exec).unwrap();
    let mut u = Unwinder::default();
    let (start, pgoff) = (text.vaddr & !0xfff, text.offset & !0xfff);
    u.add_module(&exe, start, text.vaddr + text.size, pgoff);
    // leafA (no frame) called by Work (a 0x18-byte frame), as if Work
    // had been called by runtime.goexit, the outermost frame.
    let call = objdump(&exe, r"^main\.\(\*Worker\)\.Work$")
        .into_iter()
        .find(|(_, i)| i.starts_with("CALL main.leafA"))
        .unwrap()
        .0;
    let (ip, ra1, ra2) = (
        entry("main.leafA") + 4,
        call + 5,
        entry("runtime.goexit") + 1,
    );
    let sp = 0x7ffc_0000_1000u64;
    let mut stack = vec![0u8; 0x40];
    let mut put = |at: usize, v: u64| stack[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    put(0, ra1);
    put(0x18, 0x7ffc_0000_0bbb); // Work's caller's rbp
    put(0x20, ra2);
    put(0x28, 0x5555); // not a frame: above the outermost one
    let mut out = Vec::new();
    let walk = u.unwind(ip, sp, 0x1234, &stack, &mut out);
    assert_eq!(out, vec![ip, ra1 - 1, ra2 - 1]);
    assert_eq!(walk, Walk::Complete { reach: sp + 0x28 });
    // The frame-pointer helpers: the return address a frameless leaf
    // leaves at sp, and where a chain ends.
    assert_eq!(u.go_return_address(ip, &stack), Some(ra1));
    assert_eq!(u.go_return_address(ra1 - 1, &stack[8..]), Some(ra2));
    assert_eq!(u.go_return_address(0x1234, &stack), None);
    let chain = [ip, ra1 - 1, ra2 - 1, 0x5554];
    assert_eq!(u.go_stack_len(&chain), Some(3));
    assert_eq!(u.go_stack_len(&chain[..3]), None);
}

#[test]
fn a_program_with_cfi_only_in_debug_frame_is_unwound_with_it() {
    // stacks.c without asynchronous unwind tables: its functions' CFI
    // is in .debug_frame, _start's in .eh_frame.
    let dir = std::env::temp_dir().join(format!("profd-debug-frame-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/stacks.c");
    let build = |name: &str, extra: &[&str]| {
        let exe = dir.join(name);
        let status = std::process::Command::new("cc")
            .args(["-O2", "-g", "-fomit-frame-pointer"])
            .arg("-fno-asynchronous-unwind-tables")
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .arg(&source)
            .status()
            .expect("running cc");
        assert!(status.success());
        exe
    };
    // Debug sections compressed with zlib (SHF_COMPRESSED) read the same.
    let compressed = build("stacks-gz", &["-gz"]);
    let flags = std::process::Command::new("readelf")
        .args(["-S", "-W"])
        .arg(&compressed)
        .output()
        .expect("running readelf");
    let flags = String::from_utf8_lossy(&flags.stdout);
    let line = flags.lines().find(|l| l.contains(".debug_frame")).unwrap();
    assert!(line.split_whitespace().any(|w| w.contains('C')), "{line}");
    let gz = elf_data(&compressed).unwrap();
    assert!(gz.debug_frame_first, "{gz:?}");
    let exe = build("stacks", &[]);
    let data = elf_data(&exe).unwrap();
    assert!(data.debug_frame_first, "{data:?}");
    assert_eq!(
        gz.debug_frame.as_deref(),
        data.debug_frame.as_deref(),
        "the same .debug_frame once uncompressed"
    );
    let bytes = std::fs::read(&exe).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let symbol = |name: &str| {
        use object::ObjectSymbol;
        elf.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap()
            .address()
    };
    let only = |a: u64| data.eh_frame_only.iter().any(|r| r.contains(&a));
    assert!(only(symbol("_start")));
    assert!(!only(symbol("main")));
    // A binary built as usual keeps .eh_frame.
    assert!(
        !elf_data(&std::env::current_exe().unwrap())
            .unwrap()
            .debug_frame_first
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_binary_rewritten_in_place_is_read_again() {
    let path = std::env::temp_dir().join(format!("profd-rewritten-{}", std::process::id()));
    let exe = std::env::current_exe().unwrap();
    std::fs::copy("/bin/true", &path).unwrap();
    let before = elf_data(&path).expect("/bin/true's unwind data");
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    // Same inode, other contents.
    std::fs::write(&path, std::fs::read(&exe).unwrap()).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap()),
        inode
    );
    let after = elf_data(&path).expect("the new contents' unwind data");
    let own = elf_data(&exe).unwrap();
    let range = |d: &ElfUnwindData| d.text.clone();
    assert_ne!(range(&before), range(&after));
    assert_eq!(range(&after), range(&own));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn unwind_data_is_read_when_a_walk_reaches_it_once_for_all_unwinders() {
    let path = std::env::temp_dir().join(format!("profd-unwinders-{}", std::process::id()));
    std::fs::copy("/bin/true", &path).unwrap();
    let segments = Segments::read(&path).unwrap();
    let exec = *segments.0.iter().find(|l| l.exec).expect("a text segment");
    let (start, pgoff) = (0x5555_0000_0000, exec.offset & !0xfff);
    let end = start + exec.size + 0x1000;
    let mut units = [Unwinder::default(), Unwinder::default()];
    for u in &mut units {
        u.add_module(&path, start, end, pgoff);
    }
    // Known, not read: no walk reached it.
    assert!(!UNWIND_DATA.holds(&path), "read before any walk");
    assert_eq!(units[0].tables_held() + units[1].tables_held(), 0);
    // A walk from outside it reads nothing either.
    let sp = 0x7ffc_0000_1000;
    units[0].unwind(0x1234, sp, 0, &[0u8; 16], &mut Vec::new());
    assert!(!UNWIND_DATA.holds(&path));
    // A walk from inside it reads it, once for both unwinders.
    let ip = start + (exec.offset - pgoff) + 4;
    for u in &mut units {
        u.unwind(ip, sp, 0, &[0u8; 16], &mut Vec::new());
        assert_eq!(u.tables_held(), 1);
    }
    assert!(UNWIND_DATA.holds(&path));
    let held = |u: &Unwinder| match &u.slots[0].tables {
        Tables::Held(h) => h.clone(),
        _ => panic!("not held"),
    };
    assert!(Arc::ptr_eq(&held(&units[0]), &held(&units[1])), "one copy");
    // Evicted while in use: both let go of it, and read it again when a
    // walk reaches it.
    UNWIND_DATA.evict_file(&path);
    for u in &mut units {
        u.drop_evicted();
        assert_eq!(u.tables_held(), 0);
    }
    assert!(!UNWIND_DATA.holds(&path));
    units[1].unwind(ip, sp, 0, &[0u8; 16], &mut Vec::new());
    assert!(UNWIND_DATA.holds(&path), "read again");
    assert_eq!(units[1].tables_held(), 1);
    // The segments alone, from the program headers.
    assert_eq!(segments.vaddr(exec.offset + 5), Some(exec.vaddr + 5));
    assert_eq!(segments.vaddr(u64::MAX), None);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn reads_own_unwind_tables_and_maps_the_text_mapping() {
    let maps = crate::process::maps::ProcessMaps::read(std::process::id()).unwrap();
    let here = reads_own_unwind_tables_and_maps_the_text_mapping as fn() as usize as u64;
    let m = maps.find(here).unwrap();
    let exe = std::env::current_exe().unwrap();
    let data = elf_data(&exe).expect("own ELF");
    assert!(data.eh_frame.is_some() && data.eh_frame_hdr.is_some());
    let bias = bias(&data.loads, m.start, m.pgoff).expect("text mapping is in a PT_LOAD");
    // The symbol table's address of a function plus the bias is where it runs.
    assert!(m.start <= here && here < m.end);
    assert!(bias <= here);
}

#[test]
fn bias_matches_the_executable_segment_sharing_a_page() {
    // rust-lld: R at offset 0 (0x17548 bytes), R E at offset 0x17550
    // mapped at vaddr 0x18550; the r-x mapping starts at pgoff 0x17000.
    let data = ElfUnwindData {
        text: None,
        eh_frame: None,
        eh_frame_hdr: None,
        debug_frame: None,
        debug_frame_first: false,
        eh_frame_only: Vec::new(),
        got: None,
        loads: Segments(vec![
            Load {
                offset: 0,
                size: 0x17548,
                vaddr: 0,
                exec: false,
            },
            Load {
                offset: 0x17550,
                size: 0x1000,
                vaddr: 0x18550,
                exec: true,
            },
        ]),
    };
    let start = 0x5555_5556_c000;
    let shift = bias(&data.loads, start, 0x17000).unwrap();
    // The segment's first byte (file 0x17550) is at start + 0x550.
    assert_eq!(0x18550 + shift, start + 0x550);
    // A classic layout: text at offset 0x1000, vaddr 0x1000.
    let classic = ElfUnwindData {
        loads: Segments(vec![Load {
            offset: 0x1000,
            size: 0x2000,
            vaddr: 0x1000,
            exec: true,
        }]),
        ..data
    };
    assert_eq!(bias(&classic.loads, 0x7000_1000, 0x1000), Some(0x7000_0000));
}

#[test]
fn frame_pointer_chain_leaving_the_copy_is_truncated() {
    // No module known: frame pointers. sp = 0x1000; the frame at bp =
    // 0x1008 holds the caller's bp (0x2000, outside the copy) and a
    // return address.
    let mut stack = vec![0u8; 32];
    stack[8..16].copy_from_slice(&0x2000u64.to_ne_bytes());
    stack[16..24].copy_from_slice(&0x5555u64.to_ne_bytes());
    let mut u = Unwinder::default();
    let mut out = Vec::new();
    let walk = u.unwind(0x4444, 0x1000, 0x1008, &stack, &mut out);
    assert_eq!(out, vec![0x4444, 0x5554]);
    // A larger copy would hold the caller's frame at 0x2000.
    assert_eq!(walk, Walk::CopyEnded);
    // One out of any copy's reach (65528 bytes above sp) ends the walk
    // as truncated for other reasons.
    stack[8..16].copy_from_slice(&(0x1000u64 + 65528).to_ne_bytes());
    let walk = u.unwind(0x4444, 0x1000, 0x1008, &stack, &mut out);
    assert_eq!(walk, Walk::Truncated);
}

/// An unwinder knowing this process's libc, and the address of the first
/// stub of libc's .plt (its CFA is the DWARF expression rsp + 8 (+ 8)).
fn libc_plt_stub() -> (Unwinder, u64) {
    let maps = crate::process::maps::ProcessMaps::read(std::process::id()).unwrap();
    let libc = maps
        .iter()
        .find(|m| m.module().starts_with("libc.so"))
        .expect("libc is mapped");
    let path = &libc.file().expect("libc was opened").readable;
    let bytes = std::fs::read(path).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let plt = elf.section_by_name(".plt").expect("libc has a .plt");
    let bias = bias(&elf_data(path).unwrap().loads, libc.start, libc.pgoff).unwrap();
    // The first stub after the PLT header.
    let ip = plt.address() + 16 + bias;
    assert!(libc.start <= ip && ip < libc.end);
    let mut u = Unwinder::default();
    u.add_mapping(libc);
    (u, ip)
}

#[test]
fn a_stack_pointer_outside_user_space_is_not_walked() {
    // Found by fuzz/fuzz_targets/unwind.rs: in a PLT stub, whose CFA is
    // the DWARF expression rsp + 8 (+ 8), sp = u64::MAX - 1 wrapped the
    // CFA to 6 and framehop's `cfa - 8` overflowed (a panic wherever
    // overflow checks are on, as in this test). libc's .plt has such CFI.
    // (Also found: sp = 0 where libgcc's CFA is rsp + 0, the same panic.)
    let (mut u, ip) = libc_plt_stub();
    for sp in [u64::MAX - 1, 1 << 56, 0xfff, 0] {
        let mut out = Vec::new();
        let walk = u.unwind(ip, sp, 0, &[0u8; 16], &mut out);
        assert_eq!((walk, out), (Walk::Truncated, vec![ip]), "sp {sp:#x}");
    }
    // From a stack pointer in user space the stub is walked as before.
    let mut out = Vec::new();
    let ret = 0x5555_5555_1234u64;
    u.unwind(ip, 0x7ffc_0000_1000, 0, &ret.to_ne_bytes(), &mut out);
    assert_eq!(out, vec![ip, ret - 1]);
}

#[test]
fn jit_frames_are_walked_by_frame_pointer_then_native_ones_by_cfi() {
    // JIT code lies in no module: its frame is stepped by frame pointer,
    // and the unwinder goes on with the tables of the native code it
    // returns to (here a PLT stub of libc, whose CFA is rsp + 8).
    let (mut u, stub) = libc_plt_stub();
    // sp = 0x7ffc_0000_1000; the JIT frame's bp = sp + 0x10 holds the
    // caller's bp (0: the outermost frame uses none) and the return
    // address into the stub; above it, the stub's return address.
    let (sp, jit_ip, outer) = (
        0x7ffc_0000_1000u64,
        0x7f00_dead_0040u64,
        0x7f00_dead_1234u64,
    );
    let mut stack = vec![0u8; 0x28];
    stack[0x18..0x20].copy_from_slice(&(stub + 1).to_ne_bytes());
    stack[0x20..0x28].copy_from_slice(&outer.to_ne_bytes());
    let mut out = Vec::new();
    let walk = u.unwind(jit_ip, sp, sp + 0x10, &stack, &mut out);
    assert_eq!(out, vec![jit_ip, stub, outer - 1]);
    assert_eq!(walk, Walk::Complete { reach: sp + 0x28 });
}

#[test]
fn a_zero_frame_pointer_ends_the_stack() {
    let mut u = Unwinder::default();
    let mut out = Vec::new();
    assert_eq!(
        u.unwind(0x4444, 0x1000, 0, &[0u8; 16], &mut out),
        Walk::Complete { reach: 0x1000 }
    );
    assert_eq!(out, vec![0x4444]);
}

#[test]
fn a_complete_walk_tells_how_far_up_the_stack_it_read() {
    // The frame at bp = 0x1008 holds a zero caller bp and a return
    // address at 0x1010..0x1018; the copy goes on to 0x1040.
    let mut stack = vec![0xffu8; 64];
    stack[8..16].copy_from_slice(&0u64.to_ne_bytes());
    stack[16..24].copy_from_slice(&0x5555u64.to_ne_bytes());
    let mut u = Unwinder::default();
    let mut out = Vec::new();
    let walk = u.unwind(0x4444, 0x1000, 0x1008, &stack, &mut out);
    assert_eq!(out, vec![0x4444, 0x5554]);
    assert_eq!(walk, Walk::Complete { reach: 0x1018 });
    // The same walk over the copy cut at its reach is the same.
    out.clear();
    assert_eq!(
        u.unwind(0x4444, 0x1000, 0x1008, &stack[..0x18], &mut out),
        walk
    );
    assert_eq!(out, vec![0x4444, 0x5554]);
    // Cut below it, the walk stops short.
    out.clear();
    let short = u.unwind(0x4444, 0x1000, 0x1008, &stack[..0x17], &mut out);
    assert_eq!(short, Walk::CopyEnded);
}
