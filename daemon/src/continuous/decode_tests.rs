//! Tests of reading windows back: whole windows as they were written, and
//! damaged or forged ones refused early, having read little.
use super::*;
use crate::continuous::encode::encode;
use flate2::{write::GzEncoder, Compression};
use std::cell::Cell;
use std::io::Write;
use std::rc::Rc;

/// A reader counting the bytes read from it.
struct Counting<'a> {
    bytes: &'a [u8],
    read: Rc<Cell<usize>>,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.bytes.read(buf)?;
        self.read.set(self.read.get() + n);
        Ok(n)
    }
}

/// Why `got` was refused (a window accepted is summed up, not printed).
fn refused(got: Result<api::Window, DecodeError>) -> String {
    match got {
        Err(why) => why.to_string(),
        Ok(w) => panic!(
            "accepted: a window of {} stacks",
            w.services.iter().map(|s| s.stacks.len()).sum::<usize>()
        ),
    }
}

/// `decode_from` over `gz`, and how many of its bytes it read.
fn decode_counting(gz: &[u8]) -> (Result<api::Window, DecodeError>, usize) {
    let read = Rc::new(Cell::new(0));
    let got = decode_from(Counting {
        bytes: gz,
        read: read.clone(),
    });
    (got, read.get())
}

fn stack(tid: u32, frames: usize, count: u64) -> api::WindowStack {
    api::WindowStack {
        tid,
        function: vec![0; frames],
        line: vec![7; frames],
        address: (0..frames as u64).map(|a| 0x40_1000 + a).collect(),
        count,
    }
}

/// A window of `attributed` samples with one service of `stacks`.
fn window(attributed: u64, stacks: Vec<api::WindowStack>) -> api::Window {
    api::Window {
        id: "ab12".into(),
        start_unix_ns: 10,
        end_unix_ns: 20,
        host: "web-1".into(),
        frequency_hz: 19,
        totals: Some(api::Totals {
            attributed,
            ..Default::default()
        }),
        services: vec![api::ServiceWindow {
            service: "app".into(),
            samples: attributed,
            functions: vec![api::WindowFunction {
                name: "main".into(),
                module: "app".into(),
                ..Default::default()
            }],
            threads: vec![api::WindowThread {
                tid: 10,
                pid: 10,
                name: "app".into(),
                samples: attributed,
            }],
            stacks,
            ..Default::default()
        }],
        processes_exited: 2,
        ..Default::default()
    }
}

/// gzip of `head` followed by `chunk` `times` times, written a chunk at a
/// time.
fn gzip_repeated(head: &[u8], chunk: &[u8], times: usize) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(head).unwrap();
    for _ in 0..times {
        gz.write_all(chunk).unwrap();
    }
    gz.finish().unwrap()
}

/// What a window was written as, it is read back as, in whole and as its
/// head (its own fields, no services), prost's field order too.
#[test]
fn windows_read_back_as_written() {
    let many: Vec<_> = (0..5000).map(|i| stack(i, 40, 2)).collect();
    let w = window(10_000, many);
    let e = encode(w.clone()).unwrap();
    assert_eq!(decode(&e.gz).unwrap(), w);
    let head = decode_head(&e.gz[..]).unwrap();
    assert_eq!(
        head,
        api::Window {
            services: Vec::new(),
            ..w.clone()
        }
    );
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&w.encode_to_vec()).unwrap();
    assert_eq!(decode(&gz.finish().unwrap()).unwrap(), w);
}

#[test]
fn what_is_not_a_window_says_so() {
    assert!(refused(decode(b"plain")).starts_with("not gzip"));
    let gz = gzip_repeated(&[0xff, 0xff, 0xff], &[], 0);
    let err = refused(decode(&gz));
    assert!(err.starts_with("not a profd.v1.Window"), "{err}");
    // Cut short: inside a service.
    let e = encode(window(3, vec![stack(1, 3, 3)])).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&e.gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let cut = gzip_repeated(&raw[..raw.len() - 4], &[], 0);
    let err = refused(decode(&cut));
    assert!(err.contains("ends inside"), "{err}");
}

/// The bound follows the samples a window counts, up to the most stacks a
/// window holds, and never passes its ceiling.
#[test]
fn the_bound_is_what_a_window_of_its_samples_can_hold() {
    assert_eq!(bound(0), HEAD_BYTES);
    assert_eq!(bound(10), HEAD_BYTES + 10 * STACK_BYTES);
    assert_eq!(bound(u64::MAX), MAX_WINDOW_BYTES);
    const { assert!(MAX_STACKS * STACK_BYTES > MAX_WINDOW_BYTES) };
}

/// A gzip bomb of zeros (64 MiB from 64 KiB): refused at its first byte,
/// having read a few KiB of it.
#[test]
fn a_bomb_of_zeros_is_refused_at_once() {
    let gz = gzip_repeated(&[], &[0; 1 << 20], 64);
    let (got, read) = decode_counting(&gz);
    let err = refused(got);
    assert!(err.contains("field number 0"), "{err}");
    assert!(read <= 64 << 10, "read {read} of {} bytes", gz.len());
}

/// A gzipped window of `samples` samples whose one service holds `times`
/// copies of `one`, written a copy at a time (never whole in memory).
fn window_of_copies(samples: u64, one: &api::WindowStack, times: usize) -> Vec<u8> {
    let mut chunk = Vec::new();
    prost::encoding::message::encode(STACKS_FIELD, one, &mut chunk);
    let mut head = window(samples, Vec::new());
    let service = head.services.pop().unwrap();
    let mut raw = head.encode_to_vec();
    encode_key(SERVICES_FIELD, WireType::LengthDelimited, &mut raw);
    encode_varint(
        (service.encoded_len() + chunk.len() * times) as u64,
        &mut raw,
    );
    service.encode_raw(&mut raw);
    gzip_repeated(&raw, &chunk, times)
}

/// A window whose head is right but whose stacks go on past what its
/// samples allow: refused as soon as it passes its bound, by stacks or by
/// bytes, having read a small part of the file.
#[test]
fn a_window_growing_past_its_bound_is_refused_early() {
    // Stacks: 3 samples, and a service of 100 000 stacks of 16 frames.
    let gz = window_of_copies(3, &stack(1, 16, 1), 100_000);
    let (got, read) = decode_counting(&gz);
    let err = refused(got);
    assert!(err.contains("more stacks than its 3 samples"), "{err}");
    assert!(read <= 256 << 10, "read {read} of {} bytes", gz.len());

    // Bytes: 200 samples (a bound of 13.5 MiB), and 200 stacks of 40 000
    // frames (625 KiB each once decoded).
    let gz = window_of_copies(200, &stack(1, 40_000, 1), 200);
    let (got, read) = decode_counting(&gz);
    let err = refused(got);
    assert!(
        err.contains(&format!("more than the {} bytes", bound(200))),
        "{err}"
    );
    assert!(read < gz.len() / 4, "read {read} of {} bytes", gz.len());
}
