use super::*;

/// Memory in one flat run of bytes from `base`; nothing else is readable.
struct Flat {
    base: u64,
    bytes: Vec<u8>,
}

impl Flat {
    fn put(&mut self, addr: u64, b: &[u8]) {
        let at = (addr - self.base) as usize;
        self.bytes[at..at + b.len()].copy_from_slice(b);
    }

    fn u64(&mut self, addr: u64, v: u64) {
        self.put(addr, &v.to_le_bytes());
    }

    fn i32(&mut self, addr: u64, v: i32) {
        self.put(addr, &v.to_le_bytes());
    }
}

impl Memory for Flat {
    fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let at = addr
            .checked_sub(self.base)
            .map(|a| a as usize)
            .filter(|a| a + buf.len() <= self.bytes.len())
            .ok_or_else(|| std::io::Error::other(format!("{addr:#x} not mapped")))?;
        buf.copy_from_slice(&self.bytes[at..at + buf.len()]);
        Ok(())
    }
}

const BASE: u64 = 0x10_0000;
/// Where the fake JVM keeps things.
const SYMBOLS: u64 = BASE;
const STRINGS: u64 = BASE + 0x1000;
const STRUCTS: u64 = BASE + 0x3000;
const TYPES_AT: u64 = BASE + 0x6000;
const STATICS: u64 = BASE + 0x7000;
const SEGMAP: u64 = BASE + 0x8000;
const CODE: u64 = BASE + 0x1_0000;
/// 64-byte segments, 1024 of them.
const LOG2: u32 = 6;
const CODE_END: u64 = CODE + (1024 << LOG2);

/// The CodeBlob field offsets the fake uses (JDK 17's).
const FRAME_SIZE: u64 = 28;
const FRAME_COMPLETE: u64 = 20;
const CODE_BEGIN: u64 = 32;
const CODE_END_AT: u64 = 40;
const HEAP_BLOCK: u64 = 16;
const NAME: u64 = 96;
const VERIFIED_ENTRY: u64 = 224;
/// Where blob names are kept.
const NAMES: u64 = STATICS + 0x800;

/// A JVM whose VMStructs name one code heap at CODE, with JDK 17's entry
/// layout (stride 48) and a few unrelated entries among the wanted ones.
fn jvm() -> (Flat, HashMap<String, u64>) {
    let mut m = Flat {
        base: BASE,
        bytes: vec![0; (CODE_END - BASE) as usize],
    };
    let mut symbols = HashMap::new();
    let mut var = |m: &mut Flat, name: &str, v: u64| {
        let at = SYMBOLS + 8 * symbols.len() as u64;
        m.u64(at, v);
        symbols.insert(name.to_string(), at);
    };
    for (name, v) in [
        ("gHotSpotVMStructs", STRUCTS),
        ("gHotSpotVMStructEntryArrayStride", 48),
        ("gHotSpotVMStructEntryTypeNameOffset", 0),
        ("gHotSpotVMStructEntryFieldNameOffset", 8),
        ("gHotSpotVMStructEntryOffsetOffset", 32),
        ("gHotSpotVMStructEntryAddressOffset", 40),
        ("gHotSpotVMTypes", TYPES_AT),
        ("gHotSpotVMTypeEntryArrayStride", 40),
        ("gHotSpotVMTypeEntryTypeNameOffset", 0),
        ("gHotSpotVMTypeEntrySizeOffset", 32),
    ] {
        var(&mut m, name, v);
    }
    let mut strings = STRINGS;
    let mut string = |m: &mut Flat, s: &str| {
        let at = strings;
        m.put(at, s.as_bytes());
        strings += s.len() as u64 + 1;
        at
    };
    // (type, field, offset, address)
    let heaps = STATICS;
    let entries: &[(&str, &str, u64, u64)] = &[
        ("oopDesc", "_mark", 0, 0),
        ("CodeCache", "_heaps", 0, heaps),
        ("CodeCache", "_low_bound", 0, heaps + 0x20),
        ("GrowableArrayBase", "_len", 0, 0),
        ("GrowableArray<int>", "_data", 8, 0),
        ("CodeHeap", "_memory", 8, 0),
        ("CodeHeap", "_segmap", 120, 0),
        ("CodeHeap", "_log2_segment_size", 256, 0),
        ("VirtualSpace", "_low_boundary", 0, 0),
        ("VirtualSpace", "_high_boundary", 8, 0),
        ("VirtualSpace", "_low", 16, 0),
        ("HeapBlock", "_header", 0, 0),
        ("HeapBlock::Header", "_used", 8, 0),
        ("CodeBlob", "_name", NAME, 0),
        ("CodeBlob", "_frame_complete_offset", FRAME_COMPLETE, 0),
        ("CodeBlob", "_frame_size", FRAME_SIZE, 0),
        ("CodeBlob", "_code_begin", CODE_BEGIN, 0),
        ("CodeBlob", "_code_end", CODE_END_AT, 0),
        ("nmethod", "_verified_entry_point", VERIFIED_ENTRY, 0),
    ];
    for (i, (t, f, offset, address)) in entries.iter().enumerate() {
        let e = STRUCTS + 48 * i as u64;
        let (t, f) = (string(&mut m, t), string(&mut m, f));
        m.u64(e, t);
        m.u64(e + 8, f);
        m.u64(e + 32, *offset);
        m.u64(e + 40, *address);
    }
    for (i, (t, size)) in [("CodeBlob", 104), ("HeapBlock", HEAP_BLOCK)]
        .iter()
        .enumerate()
    {
        let e = TYPES_AT + 40 * i as u64;
        let t = string(&mut m, t);
        m.u64(e, t);
        m.u64(e + 32, *size);
    }
    // CodeCache::_heaps → a GrowableArray of one CodeHeap.
    let (array, data, heap) = (STATICS + 0x100, STATICS + 0x200, STATICS + 0x300);
    m.u64(heaps, array);
    m.i32(array, 1);
    m.u64(array + 8, data);
    m.u64(data, heap);
    m.u64(heap + 8 + 16, CODE);
    m.u64(heap + 8 + 8, CODE_END);
    m.u64(heap + 120 + 16, SEGMAP);
    m.i32(heap + 256, LOG2 as i32);
    // The whole map free until blocks are put in it.
    m.put(SEGMAP, &[FREE_SEGMENT; 1024]);
    (m, symbols)
}

/// A used block of `segments` at segment `first`, its blob's code from
/// `code` bytes in, with a frame of `words` built `complete` bytes in.
fn blob(m: &mut Flat, first: u64, segments: u64, code: u64, words: i32, complete: i32) -> u64 {
    let block = CODE + (first << LOG2);
    // As HotSpot marks them: 0 at the start, then hops 1 to 254, over again.
    for s in 0..segments {
        let hop = if s == 0 { 0 } else { (s - 1) % 254 + 1 };
        m.put(SEGMAP + first + s, &[hop as u8]);
    }
    m.u64(block, segments);
    m.put(block + 8, &[1]);
    let b = block + HEAP_BLOCK;
    m.i32(b + FRAME_SIZE, words);
    m.i32(b + FRAME_COMPLETE, complete);
    m.u64(b + CODE_BEGIN, block + code);
    m.u64(b + CODE_END_AT, block + (segments << LOG2));
    block + code
}

/// Name the blob whose block starts at segment `first`.
fn name(m: &mut Flat, first: u64, name: &str) {
    let at = NAMES + 32 * first;
    m.put(at, name.as_bytes());
    m.put(at + name.len() as u64, &[0]);
    m.u64(CODE + (first << LOG2) + HEAP_BLOCK + NAME, at);
}

fn layout(m: &Flat, symbols: &HashMap<String, u64>) -> Layout {
    Layout::read(m, |name| symbols.get(name).copied()).expect("the tables parse")
}

#[test]
fn the_code_heaps_and_blob_fields_are_read_from_vmstructs() {
    let (m, symbols) = jvm();
    assert_eq!(
        layout(&m, &symbols),
        Layout {
            heaps: vec![Heap {
                low: CODE,
                high: CODE_END,
                segmap: SEGMAP,
                log2_segment: LOG2,
            }],
            heap_block: HEAP_BLOCK,
            used: 8,
            name: NAME,
            frame_size: FRAME_SIZE,
            frame_complete: FRAME_COMPLETE,
            code_begin: CODE_BEGIN,
            code_end: CODE_END_AT,
            verified_entry: Some(VERIFIED_ENTRY),
        }
    );
    // Without the verified entry: all but it.
    let mut older = jvm().0;
    let at = (m
        .bytes
        .windows(22)
        .position(|w| w == b"_verified_entry_point\0"))
    .unwrap();
    older.bytes[at + 1] = b'V';
    let l = layout(&older, &symbols);
    assert_eq!(l.verified_entry, None);
    assert_eq!(l.frame_size, FRAME_SIZE);
    // A missing symbol, or a field HotSpot no longer has: nothing.
    let mut fewer = symbols.clone();
    fewer.remove("gHotSpotVMTypes");
    assert_eq!(Layout::read(&m, |n| fewer.get(n).copied()), None);
    let mut renamed = jvm().0;
    let (frame_size, _) = (m.bytes.windows(12).position(|w| w == b"_frame_size\0"))
        .map(|at| (at, ()))
        .unwrap();
    renamed.bytes[frame_size + 1] = b'F';
    assert_eq!(Layout::read(&renamed, |n| symbols.get(n).copied()), None);
}

#[test]
fn a_block_is_found_by_the_segment_map_hops() {
    let (mut m, symbols) = jvm();
    let heap = layout(&m, &symbols).heaps[0].clone();
    // A block of 600 segments: its map counts up to 254 and starts over,
    // longer than one read of the map.
    blob(&mut m, 10, 600, 64, 4, 16);
    blob(&mut m, 610, 2, 64, 4, 16);
    let start = CODE + (10 << LOG2);
    for seg in [10, 11, 264, 265, 519, 609] {
        let pc = CODE + (seg << LOG2) + 5;
        assert_eq!(heap.block_of(&m, pc), Some(start), "segment {seg}");
    }
    assert_eq!(
        heap.block_of(&m, CODE + (611 << LOG2)),
        Some(CODE + (610 << LOG2))
    );
    // Free segments, and a map that hops out of the heap, hold no block.
    assert_eq!(heap.block_of(&m, CODE + (700 << LOG2)), None);
    m.put(SEGMAP + 3, &[9]);
    assert_eq!(heap.block_of(&m, CODE + (3 << LOG2)), None);
}

#[test]
fn compiled_frames_are_stepped_by_their_frame_size() {
    let (mut m, symbols) = jvm();
    let l = layout(&m, &symbols);
    // 6 words: rbp and the return address among them; complete 16 bytes in.
    let code = blob(&mut m, 4, 8, 64, 6, 16);
    let body = code + 40;
    let framed = Some(Frame::Sized {
        size: 48,
        saved_bp: true,
    });
    assert_eq!(l.frame_at(&m, body, false), framed);
    assert_eq!(l.frame_at(&m, body, true), framed);
    // The sampled instruction in the prologue: unknown.
    assert_eq!(l.frame_at(&m, code + 3, true), None);
    assert_eq!(l.frame_at(&m, code + 3, false), framed);
    // In the epilogue: before pop %rbp, before the return's poll, at ret.
    m.put(body, &[0x5d]);
    let popped = Some(Frame::Sized {
        size: 16,
        saved_bp: true,
    });
    assert_eq!(l.frame_at(&m, body, true), popped);
    let ret = Some(Frame::Sized {
        size: 8,
        saved_bp: false,
    });
    m.put(body + 1, &[0x49, 0x3b, 0xa7, 0x20, 0x04, 0, 0]);
    assert_eq!(l.frame_at(&m, body + 1, true), ret);
    m.put(body + 8, &[0x0f, 0x87, 1, 0, 0, 0]);
    assert_eq!(l.frame_at(&m, body + 8, true), ret);
    m.put(body + 14, &[0xc3]);
    assert_eq!(l.frame_at(&m, body + 14, true), ret);
    // ja elsewhere is in the whole frame.
    m.put(body + 20, &[0x0f, 0x87, 1, 0, 0, 0]);
    assert_eq!(l.frame_at(&m, body + 20, true), framed);
    // The block's header and the blob's own fields are no code.
    assert_eq!(l.frame_at(&m, code - 8, false), None);
    // Outside the heap: nothing is read.
    assert_eq!(l.frame_at(&m, CODE_END + 8, false), None);
}

#[test]
fn blobs_without_a_frame_size_or_unused_are_left_to_frame_pointers() {
    let (mut m, symbols) = jvm();
    let l = layout(&m, &symbols);
    // A stub with a frame size of 0 (the call stub's frames keep rbp).
    let call_stub = blob(&mut m, 10, 4, 64, 0, -1);
    name(&mut m, 10, "StubRoutines (1)");
    assert_eq!(l.frame_at(&m, call_stub + 8, false), None);
    // The interpreter (also 0): a frame that calls is known by its rbp,
    // the sampled one (maybe before rbp is set) is left as it is.
    let interpreter = blob(&mut m, 20, 4, 64, 0, -1);
    name(&mut m, 20, "Interpreter");
    assert_eq!(
        l.frame_at(&m, interpreter + 8, false),
        Some(Frame::Interpreted)
    );
    assert_eq!(l.frame_at(&m, interpreter + 8, true), None);
    // A frame never complete is unknown as the sampled instruction.
    let stub = blob(&mut m, 30, 4, 64, 2, -1);
    assert_eq!(l.frame_at(&m, stub + 8, true), None);
    assert!(l.frame_at(&m, stub + 8, false).is_some());
    // A block freed (its map not yet marked free).
    let freed = blob(&mut m, 40, 4, 64, 6, 0);
    m.put(CODE + (40 << LOG2) + 8, &[0]);
    assert_eq!(l.frame_at(&m, freed + 8, false), None);
}

#[test]
fn a_process_without_libjvm_has_no_code_cache_until_it_maps_it() {
    let mut cache = CodeCache::of(std::process::id());
    let mut asked = 0;
    for _ in 0..3 {
        let frame = cache.frame_at(0x1234, false, || {
            asked += 1;
            None
        });
        assert_eq!(frame, None);
    }
    assert_eq!(asked, 1);
    // Until libjvm.so is mapped (a JVM starting): then it is looked for.
    cache.jvm_mapped();
    cache.frame_at(0x1234, false, || {
        asked += 1;
        None
    });
    assert_eq!(asked, 2);
    assert_eq!(CodeCache::default().frame_at(0x1234, true, || None), None);
}

#[test]
fn a_walk_steps_through_compiled_frames_by_their_sizes_and_the_interpreter_by_rbp() {
    let (mut m, symbols) = jvm();
    let l = layout(&m, &symbols);
    // leaf (compiled, 6 words) ← an interpreted method ← its compiled
    // caller (4 words) ← the call stub (rbp frames).
    let leaf = blob(&mut m, 100, 8, 64, 6, 16);
    let interpreter = blob(&mut m, 110, 8, 64, 0, -1);
    name(&mut m, 110, "Interpreter");
    let caller = blob(&mut m, 120, 8, 64, 4, 16);
    let call_stub = blob(&mut m, 130, 8, 64, 0, -1);
    let mut u = super::super::Unwinder {
        hotspot: CodeCache::with(State::Read(Jvm::Memory(Box::new(m)), l)),
        ..Default::default()
    };
    let sp = 0x7000_0000u64;
    let at = |word: u64| sp + 8 * word;
    let mut stack = vec![0u64; 32];
    // The leaf's frame: the interpreter's rbp (a general register in the
    // leaf), then the return address into the interpreter.
    stack[4] = at(8);
    stack[5] = interpreter + 20;
    // The interpreted frame at its rbp (word 8): the sender sp below it,
    // then the caller's rbp and the return address; the arguments above.
    stack[7] = at(14);
    stack[8] = 0x5;
    stack[9] = caller + 30;
    // The compiled caller's frame from the sender sp: the call stub's rbp,
    // then the return address into it.
    stack[16] = at(20);
    stack[17] = call_stub + 40;
    // The call stub's frame at its rbp (word 20): the outermost.
    let bytes: Vec<u8> = stack.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut out = Vec::new();
    // rbp holds whatever the leaf computed with it.
    let walk = u.unwind(leaf + 40, sp, 0x5, &bytes, &mut out);
    assert_eq!(
        out,
        [leaf + 40, interpreter + 19, caller + 29, call_stub + 39]
    );
    assert!(
        matches!(walk, super::super::Walk::Complete { .. }),
        "{walk:?}"
    );
}

#[test]
fn frames_are_remembered_by_pc_for_a_while() {
    let (mut m, symbols) = jvm();
    let l = layout(&m, &symbols);
    let code = blob(&mut m, 4, 8, 64, 6, 16);
    let mut cache = CodeCache::with(State::Read(Jvm::Memory(Box::new(m)), l));
    let no_libjvm = || -> Option<(std::path::PathBuf, u64)> { unreachable!() };
    for pc in [code + 20, code + 20, code + 30] {
        assert!(cache.frame_at(pc, false, no_libjvm).is_some());
    }
    assert_eq!(cache.known.len(), 2);
    // Later, what was known is forgotten (its code may have been freed).
    let Some(before) = Instant::now().checked_sub(FORGET_AFTER * 2) else {
        return;
    };
    cache.since = before;
    assert!(cache.frame_at(code + 20, false, no_libjvm).is_some());
    assert_eq!(cache.known.len(), 1);
}

#[test]
fn a_compiled_method_sampled_in_its_prologue_is_stepped_by_what_it_built() {
    let (mut m, symbols) = jvm();
    let l = layout(&m, &symbols);
    let sized = |size, saved_bp| Some(Frame::Sized { size, saved_bp });
    // An nmethod: the inline cache's check, then from the verified entry
    // `sub $0x18,%rsp; mov %rbp,0x10(%rsp)` (C2 without a stack bang).
    let code = blob(&mut m, 4, 8, 64, 4, 32);
    name(&mut m, 4, "nmethod");
    let entry = code + 16;
    m.u64(CODE + (4 << LOG2) + HEAP_BLOCK + VERIFIED_ENTRY, entry);
    m.put(entry, &[0x48, 0x81, 0xec, 0x18, 0, 0, 0]);
    m.put(entry + 7, &[0x48, 0x89, 0x6c, 0x24, 0x10]);
    for pc in [code, code + 5, entry] {
        assert_eq!(l.frame_at(&m, pc, true), sized(8, false), "{pc:#x}");
    }
    assert_eq!(l.frame_at(&m, entry + 7, true), sized(32, false));
    // Unknown instructions before the frame is complete: nothing.
    assert_eq!(l.frame_at(&m, entry + 12, true), None);

    // A stack bang, then `push %rbp; sub $0x20,%rsp` (C1, and C2 with a
    // bang); a stub without a verified entry of its own.
    let code = blob(&mut m, 20, 8, 64, 6, 32);
    m.put(code, &[0x89, 0x84, 0x24, 0, 0xc0, 0xfe, 0xff]);
    m.put(code + 7, &[0x55]);
    m.put(code + 8, &[0x48, 0x83, 0xec, 0x20]);
    for pc in [code, code + 7] {
        assert_eq!(l.frame_at(&m, pc, true), sized(8, false), "{pc:#x}");
    }
    assert_eq!(l.frame_at(&m, code + 8, true), sized(16, true));
    // `push %rbp; mov %rsp,%rbp` (runtime stubs).
    m.put(code + 8, &[0x48, 0x89, 0xe5]);
    assert_eq!(l.frame_at(&m, code + 8, true), sized(16, true));
    // Not the sampled instruction: the whole frame.
    assert_eq!(l.frame_at(&m, code + 8, false), sized(48, true));
}
