//! Unit tests of what callers are shown of kernel frames: names without
//! addresses, folding, and the function table folded the same way as the
//! whole profile.
use super::*;
use crate::export;
use crate::model::ResolvedStack;
use crate::testdata::{known, A, C, MAIN, R};
use crate::views;

const K: u64 = 0xffff_ffff_8100_0000;

/// `known()` with samples in the kernel: two kernel paths over `c a main`
/// (they fold into the same stack), an interrupt over `r main`, and a
/// kernel address no symbol covers.
fn with_kernel() -> (ResolvedProfile, [u32; 4]) {
    let mut p = known();
    let mut add = |name: &str| {
        p.functions.push(FunctionInfo {
            name: name.into(),
            module: KERNEL.into(),
            file: String::new(),
            inlined: false,
            origin: None,
        });
        p.functions.len() as u32 - 1
    };
    let read = add("vfs_read");
    let entry = add("entry_SYSCALL_64");
    let irq = add("asm_sysvec_apic_timer_interrupt");
    let unnamed = add(&format!("[kernel] {:#x}", K + 0x400));
    let fr = |function, address| FrameRef {
        function,
        line: 0,
        address,
    };
    let user = |f: u32, address| FrameRef {
        function: f,
        line: 1,
        address,
    };
    p.stacks.extend([
        ResolvedStack {
            tid: 10,
            frames: vec![
                fr(read, K + 0x100),
                fr(entry, K + 0x200),
                user(C, 0x7f00),
                user(A, 0x110),
                user(MAIN, 0x50),
            ],
            count: 2,
        },
        ResolvedStack {
            tid: 10,
            frames: vec![
                fr(unnamed, K + 0x400),
                fr(entry, K + 0x200),
                user(C, 0x7f00),
                user(A, 0x110),
                user(MAIN, 0x50),
            ],
            count: 1,
        },
        ResolvedStack {
            tid: 11,
            frames: vec![fr(irq, K + 0x300), user(R, 0x400), user(MAIN, 0x52)],
            count: 3,
        },
    ]);
    p.attributed += 6;
    (p, [read, entry, irq, unnamed])
}

/// Every hex number in `text` in the kernel half of the address space.
fn kernel_addresses(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| is_kernel_address(w))
        .map(str::to_string)
        .collect()
}

/// Every address of a pprof export: locations and mapping bounds.
fn pprof_addresses(p: &ResolvedProfile) -> Vec<u64> {
    use prost::Message;
    use std::io::Read;
    let mut raw = Vec::new();
    flate2::read::MultiGzDecoder::new(&export::pprof(p)[..])
        .read_to_end(&mut raw)
        .unwrap();
    let prof = crate::pprof_proto::Profile::decode(&raw[..]).unwrap();
    let locations = prof.location.iter().map(|l| l.address);
    let mappings = prof
        .mapping
        .iter()
        .flat_map(|m| [m.memory_start, m.memory_limit]);
    locations.chain(mappings).collect()
}

/// Every text export, and the JSON report of the function table.
fn texts(p: &ResolvedProfile) -> String {
    let session = api::Session::default();
    [
        export::folded(p),
        export::speedscope(p),
        String::from_utf8(export::svg(p, "t").unwrap()).unwrap(),
        serde_json::to_string(&export::json(&session, &views::functions(p))).unwrap(),
    ]
    .join("\n")
}

#[test]
fn the_fixture_shows_kernel_addresses_in_full() {
    let (mut p, _) = with_kernel();
    let before = p.clone();
    KernelFrames::Full.apply(&mut p);
    assert_eq!(p, before);
    assert!(pprof_addresses(&p).iter().any(|&a| is_kernel(a)));
    assert!(!kernel_addresses(&texts(&p)).is_empty());
}

#[test]
fn names_keep_the_functions_and_drop_every_kernel_address() {
    let (mut p, [read, entry, irq, unnamed]) = with_kernel();
    let before = p.clone();
    KernelFrames::Names.apply(&mut p);
    assert_eq!(p.stacks.len(), before.stacks.len());
    for (s, b) in p.stacks.iter().zip(&before.stacks) {
        assert_eq!(
            (s.tid, s.count, s.frames.len()),
            (b.tid, b.count, b.frames.len())
        );
        for (f, g) in s.frames.iter().zip(&b.frames) {
            assert_eq!((f.function, f.line), (g.function, g.line));
            let address = if is_kernel(g.address) { 0 } else { g.address };
            assert_eq!(f.address, address);
        }
    }
    let name = |id: u32| p.functions[id as usize].name.as_str();
    assert_eq!(name(read), "vfs_read");
    assert_eq!(name(entry), "entry_SYSCALL_64");
    assert_eq!(name(irq), "asm_sysvec_apic_timer_interrupt");
    assert_eq!(name(unnamed), "[kernel]");
    assert_eq!(views::functions(&p).len(), views::functions(&before).len());
    let addresses = pprof_addresses(&p);
    assert!(addresses.iter().all(|&a| !is_kernel(a)), "{addresses:x?}");
    assert!(addresses.contains(&0x7f00), "user addresses stay");
    assert_eq!(kernel_addresses(&texts(&p)), Vec::<String>::new());
}

#[test]
fn folded_kernel_frames_are_one_frame_and_no_kernel_name_is_left() {
    let (mut p, [read, entry, irq, unnamed]) = with_kernel();
    let before = p.clone();
    KernelFrames::Folded.apply(&mut p);
    let folded = before.functions.len() as u32;
    assert_eq!(p.functions[folded as usize], folded_function(), "added");
    let k = FrameRef {
        function: folded,
        line: 0,
        address: 0,
    };
    // The two kernel paths over `c a main` are one stack now.
    let kernel_stacks: Vec<(u32, Vec<FrameRef>, u64)> = p
        .stacks
        .iter()
        .filter(|s| s.frames.first() == Some(&k))
        .map(|s| (s.tid, s.frames.clone(), s.count))
        .collect();
    let user = |s: usize| before.stacks[s].frames[2..].to_vec();
    assert_eq!(
        kernel_stacks,
        [
            (10, [vec![k], user(5)].concat(), 3),
            (
                11,
                [vec![k], before.stacks[7].frames[1..].to_vec()].concat(),
                3
            )
        ]
    );
    assert_eq!(p.stacks.len(), before.stacks.len() - 1);
    assert_eq!(p.stacks[..5], before.stacks[..5], "user stacks stay");
    let total: u64 = p.stacks.iter().map(|s| s.count).sum();
    assert_eq!(total, p.attributed);
    for id in [read, entry, irq, unnamed] {
        assert_eq!(p.functions[id as usize], folded_function());
    }
    let names = texts(&p);
    for gone in ["vfs_read", "entry_SYSCALL_64", "asm_sysvec", "0xffff"] {
        assert!(!names.contains(gone), "{gone} in\n{names}");
    }
    assert!(names.contains("[kernel]"));
    let rows = views::functions(&p);
    let row = rows.iter().find(|r| r.id == u64::from(folded)).unwrap();
    assert_eq!((row.inclusive, row.exclusive), (6, 6));
    let addresses = pprof_addresses(&p);
    assert!(addresses.iter().all(|&a| !is_kernel(a)), "{addresses:x?}");
}

#[test]
fn a_profile_with_its_own_kernel_function_folds_into_it() {
    let (mut p, _) = with_kernel();
    p.functions.push(folded_function());
    let own = p.functions.len() as u32 - 1;
    let n = p.functions.len();
    KernelFrames::Folded.apply(&mut p);
    assert_eq!(p.functions.len(), n, "nothing added");
    assert_eq!(p.stacks[5].frames[0].function, own);
}

#[test]
fn the_function_table_is_folded_as_the_profile_is() {
    for shown in [
        KernelFrames::Full,
        KernelFrames::Names,
        KernelFrames::Folded,
    ] {
        let (p, kernel_ids) = with_kernel();
        let folded = p.functions.len() as u64;
        let mut rows = views::functions(&p);
        // Window counts follow the same rule as the totals.
        for r in &mut rows {
            r.window_inclusive = r.inclusive * 2;
            r.window_exclusive = r.exclusive * 2;
        }
        let is_kernel_fn = |id: u64| kernel_ids.contains(&(id as u32));
        shown.rows(&mut rows, is_kernel_fn, folded, p.attributed);
        let mut whole = p.clone();
        shown.apply(&mut whole);
        let mut expected = views::functions(&whole);
        for r in &mut expected {
            r.window_inclusive = r.inclusive * 2;
            r.window_exclusive = r.exclusive * 2;
        }
        assert_eq!(rows, expected, "{shown:?}");
    }
}

#[test]
fn only_kernel_addresses_leave_names() {
    assert_eq!(without_addresses("vfs_read"), None);
    assert_eq!(without_addresses("prog+0x1234"), None);
    assert_eq!(without_addresses("[unknown] 0x7f0012345678"), None);
    assert_eq!(
        without_addresses("[kernel] 0xffffffff82260674").as_deref(),
        Some("[kernel]")
    );
    assert_eq!(
        without_addresses("[unknown] 0xffffffff82260674").as_deref(),
        Some("[unknown]")
    );
    assert_eq!(
        without_addresses("0xffff800000000000").as_deref(),
        Some(KERNEL)
    );
}
