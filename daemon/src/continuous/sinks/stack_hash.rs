//! The stack hash: the 64-bit key of a stack's frames in ClickHouse's
//! stack dictionary, the same on every host and every release, computed by
//! the sink here and, for rows moved from tables of the earlier layout, by
//! the server ([`SQL`]).
//!
//! Definition: SipHash-2-4 with the key 0 (ClickHouse's `sipHash64`) of
//! the frames' text, innermost frame first, each frame written as
//!
//! ```text
//! LEN(function):function LEN(module):module LEN(file):file line/inlined/address/LEN(build_id):build_id;
//! ```
//!
//! without the spaces: `LEN(s)` is the length of `s` in bytes in decimal,
//! numbers are decimal, `inlined` is 0 or 1, and a frame missing from a
//! shorter array counts as empty (0 for numbers).
//!
//! The frames hashed (and kept in the dictionary) are as [`Frame::kept`]
//! makes them: a frame its host named has the address 0, so that a stack
//! is one key on every host, whatever their address layouts.

/// One frame, as the dictionary holds it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Frame<'a> {
    pub function: &'a str,
    pub module: &'a str,
    pub file: &'a str,
    pub line: u32,
    pub inlined: bool,
    pub address: u64,
    pub build_id: &'a str,
}

impl Frame<'_> {
    /// The frame as the dictionary keeps it: its address only when its
    /// host could not name it (it then has its module's build id, to be
    /// named later), else 0. The address of named code differs from host
    /// to host (address layout randomization), and no answer uses it.
    pub fn kept(self) -> Self {
        Frame {
            address: if self.build_id.is_empty() {
                0
            } else {
                self.address
            },
            ..self
        }
    }
}

/// The hash of `frames` (innermost first).
pub fn of<'a>(frames: impl IntoIterator<Item = Frame<'a>>) -> u64 {
    let mut text = Vec::new();
    for f in frames {
        write_frame(&mut text, &f);
    }
    siphash24(&text)
}

fn write_frame(out: &mut Vec<u8>, f: &Frame<'_>) {
    use std::io::Write;
    for s in [f.function, f.module, f.file] {
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{}:{s}", s.len());
    }
    let _ = write!(
        out,
        "{}/{}/{}/{}:{};",
        f.line,
        u8::from(f.inlined),
        f.address,
        f.build_id.len(),
        f.build_id
    );
}

/// The same hash in ClickHouse, of a row of the earlier `stacks` table
/// (its arrays `functions`, `modules`, `files`, `lines`, `inlined`,
/// `addresses` and `build_ids`), its frames as [`Frame::kept`] makes them:
/// what a migration computes. An array shorter than `functions` reads as
/// its type's default past its end, as [`Frame::default`]. (A lambda of
/// several arrays: 18.16 reads with `FINAL` only the columns a lambda
/// takes as arguments.)
pub const SQL: &str = "sipHash64(arrayStringConcat(arrayMap((fn_, mo_, fl_, ln_, il_, ad_, bi_) -> concat(\
toString(length(fn_)), ':', fn_, toString(length(mo_)), ':', mo_, toString(length(fl_)), ':', fl_, \
toString(ln_), '/', toString(il_), '/', toString(if(bi_ = '', toUInt64(0), ad_)), '/', \
toString(length(bi_)), ':', bi_, ';'), \
functions, arrayResize(modules, length(functions), ''), arrayResize(files, length(functions), ''), \
arrayResize(lines, length(functions), toUInt32(0)), arrayResize(inlined, length(functions), toUInt8(0)), \
arrayResize(addresses, length(functions), toUInt64(0)), arrayResize(build_ids, length(functions), ''))))";

/// The addresses of a row of the earlier `stacks` table as [`Frame::kept`]
/// keeps them.
pub const KEPT_ADDRESSES_SQL: &str = "arrayMap((ad_, bi_) -> if(bi_ = '', toUInt64(0), ad_), \
arrayResize(addresses, length(functions), toUInt64(0)), arrayResize(build_ids, length(functions), ''))";

/// SipHash-2-4 of `data` with the key 0.
fn siphash24(data: &[u8]) -> u64 {
    let mut v = [
        0x736f_6d65_7073_6575u64,
        0x646f_7261_6e64_6f6d,
        0x6c79_6765_6e65_7261,
        0x7465_6462_7974_6573,
    ];
    let round = |v: &mut [u64; 4]| {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    };
    let compress = |v: &mut [u64; 4], m: u64| {
        v[3] ^= m;
        round(v);
        round(v);
        v[0] ^= m;
    };
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        compress(&mut v, u64::from_le_bytes(b));
    }
    let mut last = (data.len() as u64 & 0xff) << 56;
    for (i, &byte) in words.remainder().iter().enumerate() {
        last |= u64::from(byte) << (8 * i);
    }
    compress(&mut v, last);
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ClickHouse's `sipHash64` of these strings (18.16 and current
    /// releases answer the same).
    #[test]
    fn the_hash_is_clickhouses_siphash64() {
        assert_eq!(siphash24(b""), 2_202_906_307_356_721_367);
        assert_eq!(siphash24(b"abc"), 4_596_069_200_710_135_518);
        assert_eq!(
            siphash24(b"hello world, a longer string"),
            14_927_753_731_347_096_495
        );
    }

    /// The hash of a stack is fixed: a change here would split every
    /// fleet's dictionary in two.
    #[test]
    fn a_stacks_hash_is_fixed_by_its_definition() {
        let frames = [
            Frame {
                function: "leaf",
                module: "web",
                file: "a.c",
                line: 3,
                inlined: true,
                address: 16,
                build_id: "",
            },
            Frame {
                function: "main",
                module: "web",
                line: 4,
                address: 32,
                ..Frame::default()
            },
        ];
        let mut text = Vec::new();
        frames.iter().for_each(|f| write_frame(&mut text, f));
        assert_eq!(
            String::from_utf8(text.clone()).unwrap(),
            "4:leaf3:web3:a.c3/1/16/0:;4:main3:web0:4/0/32/0:;"
        );
        assert_eq!(of(frames), siphash24(&text));
        assert_eq!(of(frames), 6_837_480_333_967_578_948);
        // Every field counts, and where a name ends.
        let mut other = frames;
        other[0].function = "lea";
        other[0].module = "fweb";
        assert_ne!(of(other), of(frames));
        other = frames;
        other[1].address = 33;
        assert_ne!(of(other), of(frames));
    }

    /// Named frames are kept without their addresses, unnamed ones (with
    /// their module's build id) with them.
    #[test]
    fn only_unnamed_frames_keep_their_address() {
        let named = Frame {
            function: "main",
            address: 0x5555_0000_1234,
            ..Frame::default()
        };
        let unnamed = Frame {
            function: "[unknown] 0x1234",
            address: 0x1234,
            build_id: "ab12",
            ..Frame::default()
        };
        assert_eq!(named.kept().address, 0);
        assert_eq!(unnamed.kept().address, 0x1234);
        let elsewhere = Frame {
            address: 0x7777_0000_1234,
            ..named
        };
        assert_eq!(of([named.kept()]), of([elsewhere.kept()]));
    }
}
