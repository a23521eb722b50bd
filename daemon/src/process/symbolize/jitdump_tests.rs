//! Tests of the jitdump reader on files built record by record (and one
//! record of unwind tables CPython 3.13 wrote): loads, moves, debug and
//! unwinding info, partial and bad records, growth and the cap.
use super::*;
use std::io::Write;

/// The .eh_frame and .eh_frame_hdr CPython 3.13 `-X perf_jit` wrote for
/// one of its trampolines (11 bytes of code): a CIE, and an FDE whose
/// start, pc-relative, is 16 bytes before the frame table (the code's end
/// rounded up to 8).
pub(crate) const CPYTHON_UNWIND: &str = "1400000000000000017a5200017810011b0c070890010000\
    140000001c000000d0ffffff0b00000000440e10460e0800\
    011b033bccffffff01000000c0ffffffe8ffffff";

pub(crate) fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub(crate) fn header() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(MAGIC.to_le_bytes());
    b.extend(1u32.to_le_bytes()); // version
    b.extend(40u32.to_le_bytes()); // total_size
    b.extend(62u32.to_le_bytes()); // EM_X86_64
    b.extend(0u32.to_le_bytes());
    b.extend(4242u32.to_le_bytes()); // pid
    b.extend(0u64.to_le_bytes()); // timestamp
    b.extend(0u64.to_le_bytes()); // flags
    b
}

fn record(id: u32, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(id.to_le_bytes());
    b.extend(((body.len() + 16) as u32).to_le_bytes());
    b.extend(7u64.to_le_bytes());
    b.extend(body);
    b
}

pub(crate) fn load(addr: u64, size: u64, index: u64, name: &str) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(4242u32.to_le_bytes());
    b.extend(4243u32.to_le_bytes());
    b.extend(addr.to_le_bytes()); // vma
    b.extend(addr.to_le_bytes());
    b.extend(size.to_le_bytes());
    b.extend(index.to_le_bytes());
    b.extend(name.as_bytes());
    b.push(0);
    b.extend(std::iter::repeat_n(0xcc, size as usize)); // the code
    record(CODE_LOAD, &b)
}

fn moved(old: u64, new: u64, size: u64, index: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(4242u32.to_le_bytes());
    b.extend(4243u32.to_le_bytes());
    b.extend(new.to_le_bytes()); // vma
    b.extend(old.to_le_bytes());
    b.extend(new.to_le_bytes());
    b.extend(size.to_le_bytes());
    b.extend(index.to_le_bytes());
    record(CODE_MOVE, &b)
}

fn debug(code: u64, entries: &[(u64, u32, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(code.to_le_bytes());
    b.extend((entries.len() as u64).to_le_bytes());
    for (addr, line, file) in entries {
        b.extend(addr.to_le_bytes());
        b.extend(line.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(*file);
        b.push(0);
    }
    record(DEBUG_INFO, &b)
}

pub(crate) fn unwinding(data: &[u8], hdr: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend((data.len() as u64).to_le_bytes());
    b.extend(hdr.to_le_bytes());
    b.extend((data.len() as u64).to_le_bytes());
    b.extend(data);
    b.resize(b.len().next_multiple_of(8), 0);
    record(UNWINDING_INFO, &b)
}

pub(crate) fn parse(bytes: &[u8]) -> (JitDumpTable, usize) {
    let mut parser = Parser::default();
    let mut code = Vec::new();
    let used = parser.feed(bytes, &JitDumpTable::default(), &mut code);
    (JitDumpTable::default().with(code).unwrap_or_default(), used)
}

fn name(t: &JitDumpTable, addr: u64) -> Option<String> {
    t.lookup(addr).map(|c| c.name.to_string())
}

#[test]
fn loads_are_named_with_their_lines_and_unwind_tables() {
    let mut file = header();
    file.extend(debug(
        0x1000,
        &[
            (0x1000, 10, b"a.js"),
            (0x1010, 12, b"\xff"),
            (0x1030, 11, b"b.js"),
        ],
    ));
    let unwind = hex(CPYTHON_UNWIND);
    file.extend(unwinding(&unwind, 20));
    file.extend(load(0x1000, 0x40, 1, "JS:*leafA a.js:1:1"));
    // No debug info or unwind tables for the next load: the records
    // apply to the one load after them.
    file.extend(load(0x2000, 0xb, 2, "py::outer:x.py"));
    let (table, used) = parse(&file);
    assert_eq!(used, file.len());
    assert_eq!(table.len(), 2);
    let a = table.lookup(0x1020).unwrap();
    assert_eq!(&*a.name, "JS:*leafA a.js:1:1");
    assert_eq!(a.line(0x1000).map(|(f, l)| (&**f, l)), Some(("a.js", 10)));
    assert_eq!(a.line(0x1012).map(|(f, l)| (&**f, l)), Some(("a.js", 12)));
    assert_eq!(a.line(0x103f).map(|(f, l)| (&**f, l)), Some(("b.js", 11)));
    let u = a.unwind.as_ref().expect("unwind tables");
    assert_eq!(u.eh_frame.len(), 48);
    assert_eq!(&u.eh_frame[..], &unwind[..48]);
    assert_eq!(&u.eh_frame_hdr[..], &unwind[48..]);
    assert_eq!(a.eh_frame_address(), 0x1040);
    let b = table.lookup(0x200a).unwrap();
    assert_eq!(&*b.name, "py::outer:x.py");
    assert!(b.line(0x2000).is_none() && b.unwind.is_none());
    assert_eq!(b.eh_frame_address(), 0x2010, "after the code, 8-aligned");
    assert_eq!(name(&table, 0x200b), None);
    assert_eq!(name(&table, 0xfff), None);
}

#[test]
fn a_partial_last_record_waits_for_the_rest() {
    let mut file = header();
    file.extend(load(0x1000, 0x10, 1, "first"));
    let whole = file.len();
    file.extend(load(0x2000, 0x10, 2, "second"));
    let mut parser = Parser::default();
    let known = JitDumpTable::default();
    let mut code = Vec::new();
    // Cut in the second record: the first is read, the second waits.
    let used = parser.feed(&file[..whole + 30], &known, &mut code);
    assert_eq!(used, whole);
    assert_eq!(code.len(), 1);
    assert_eq!(parser.needs(&file[used..]), Some(file.len() - whole));
    let table = known.with(code).unwrap();
    let mut code = Vec::new();
    assert_eq!(
        parser.feed(&file[used..], &table, &mut code),
        file.len() - whole
    );
    let table = table.with(code).unwrap();
    assert_eq!(name(&table, 0x1004).as_deref(), Some("first"));
    assert_eq!(name(&table, 0x2004).as_deref(), Some("second"));
    // A header cut short is read later too.
    let mut parser = Parser::default();
    assert_eq!(parser.feed(&file[..20], &known, &mut Vec::new()), 0);
    assert!(!parser.done());
    assert_eq!(parser.feed(&file, &known, &mut Vec::new()), file.len());
}

#[test]
fn moved_code_keeps_its_name_and_tables_at_the_new_address() {
    let mut file = header();
    file.extend(debug(0x1000, &[(0x1004, 7, b"m.js")]));
    file.extend(unwinding(&hex(CPYTHON_UNWIND), 20));
    file.extend(load(0x1000, 0x20, 5, "JS:moved"));
    let first = file.len();
    file.extend(moved(0x1000, 0x8000, 0x20, 5));
    // A move of code never loaded is ignored.
    file.extend(moved(0x3000, 0x9000, 0x20, 6));
    // Read in two calls: the move finds its load in the table read before.
    let mut parser = Parser::default();
    let mut code = Vec::new();
    let empty = JitDumpTable::default();
    assert_eq!(parser.feed(&file[..first], &empty, &mut code), first);
    let table = empty.with(code).unwrap();
    let mut code = Vec::new();
    assert_eq!(
        parser.feed(&file[first..], &table, &mut code),
        file.len() - first
    );
    let table = table.with(code).unwrap();
    assert_eq!(table.len(), 2);
    let m = table.lookup(0x8010).unwrap();
    assert_eq!(&*m.name, "JS:moved");
    assert_eq!(m.line(0x8004).map(|(f, l)| (&**f, l)), Some(("m.js", 7)));
    assert!(m.unwind.is_some());
    assert_eq!(m.eh_frame_address(), 0x8020);
    assert_eq!(name(&table, 0x1010).as_deref(), Some("JS:moved"));
    assert_eq!(name(&table, 0x9000), None);
}

#[test]
fn later_loads_win_and_replace_loads_of_the_same_range() {
    let mut file = header();
    file.extend(load(0x1000, 0x100, 1, "old_long"));
    file.extend(load(0x1010, 0x10, 2, "new_short"));
    file.extend(load(0x1000, 0x8, 3, "newest"));
    file.extend(load(0x1010, 0x10, 4, "again"));
    let (table, _) = parse(&file);
    assert_eq!(table.len(), 3, "the load of 0x1010 replaced");
    assert_eq!(name(&table, 0x1004).as_deref(), Some("newest"));
    assert_eq!(name(&table, 0x1012).as_deref(), Some("again"));
    assert_eq!(name(&table, 0x1050).as_deref(), Some("old_long"));
}

#[test]
fn bad_records_and_bad_debug_info_stop_nothing_named_before() {
    // Not a jitdump: nothing read.
    let mut parser = Parser::default();
    let junk = b"not a jitdump file at all, no: not at all".to_vec();
    assert_eq!(
        parser.feed(&junk, &JitDumpTable::default(), &mut Vec::new()),
        0
    );
    assert!(parser.done());
    // Debug info whose entries run off the code (as node 20 writes when
    // a file name is garbled): the load is named, without lines.
    let mut file = header();
    file.extend(debug(
        0x1000,
        &[(0x1000, 1, b"a.js"), (0x7fff_0000, 2, b"b")],
    ));
    file.extend(load(0x1000, 0x10, 1, "named"));
    // An unwinding record with a header alone: no tables.
    file.extend(unwinding(&[0; 20], 20));
    file.extend(load(0x2000, 0x10, 2, "no_tables"));
    file.extend(record(CODE_CLOSE, &[]));
    file.extend(load(0x3000, 0x10, 3, "after_close"));
    let (table, _) = parse(&file);
    let named = table.lookup(0x1000).unwrap();
    assert!(named.line(0x1000).is_none());
    assert!(table.lookup(0x2000).unwrap().unwind.is_none());
    assert_eq!(name(&table, 0x3000), None, "read past CLOSE");
    // A record of an impossible size ends the reading.
    let mut file = header();
    file.extend(load(0x1000, 0x10, 1, "kept"));
    file.extend(1u32.to_le_bytes());
    file.extend(8u32.to_le_bytes());
    file.extend([0; 8]);
    file.extend(load(0x2000, 0x10, 2, "never"));
    let (table, _) = parse(&file);
    assert_eq!(table.len(), 1);
}

#[test]
fn a_growing_file_is_read_from_where_it_was_left_and_kept_after_removal() {
    let dir = std::env::temp_dir().join(format!("profd-jitdump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("jit-1.dump");
    let mut f = File::create(&path).unwrap();
    f.write_all(&header()).unwrap();
    f.write_all(&load(0x1000, 0x10, 1, "first")).unwrap();
    let second = load(0x2000, 0x10, 2, "second");
    f.write_all(&second[..10]).unwrap();
    let dump = JitDump::default();
    let t1 = dump.table(|| File::open(&path).ok());
    assert!(dump.is_open());
    assert_eq!(t1.len(), 1);
    assert!(t1.bytes > 0);
    // Nothing whole added: the same table.
    let again = dump.table(|| unreachable!("the file is held"));
    assert!(Arc::ptr_eq(&t1, &again));
    f.write_all(&second[10..]).unwrap();
    std::fs::remove_file(&path).unwrap();
    let t2 = dump.table(|| None);
    assert_eq!(t2.len(), 2);
    assert_eq!(name(&t2, 0x2008).as_deref(), Some("second"));
    assert_eq!(name(&t2, 0x1008).as_deref(), Some("first"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_table_stops_growing_at_its_cap_and_counts_what_it_left_out() {
    let long = "n".repeat(1 << 20);
    let mut file = header();
    for i in 0..40u64 {
        file.extend(load(0x10_0000 * (i + 1), 0x10, i, &long));
    }
    let dropped = loads_dropped();
    let (table, used) = parse(&file);
    assert_eq!(used, file.len());
    assert!(table.len() < 40 && table.len() >= 30, "{}", table.len());
    assert!(table.bytes <= MAX_TABLE_BYTES);
    assert!(loads_dropped() - dropped >= (40 - table.len()) as u64);
    // A full table is not rebuilt for loads it leaves out.
    let mut parser = Parser::default();
    let mut more = Vec::new();
    let mut again = header();
    again.extend(load(0x9000_0000, 0x10, 99, &long));
    parser.feed(&again, &table, &mut more);
    assert_eq!(more.len(), 1);
    assert!(table.with(more).is_none());
}
