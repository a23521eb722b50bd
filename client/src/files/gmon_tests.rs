//! Unit tests of `gmon`: the gmon.out bytes, layouts derived from .text, bucket ranges.
use super::*;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn gmon_layout_matches_gmon_out_h() {
    let counts = [0, 7, 70_000, 65_535, 1];
    let b = gmon_out(0x1040, 0x1054, 999, &counts, 8);
    // Header: magic, version 1, 12 spare bytes.
    assert_eq!(&b[0..4], b"gmon");
    assert_eq!(u32_at(&b, 4), 1);
    assert_eq!(&b[8..20], &[0u8; 12]);
    // Histogram record.
    assert_eq!(b[20], 0, "GMON_TAG_TIME_HIST");
    assert_eq!(u64_at(&b, 21), 0x1040, "low_pc");
    assert_eq!(u64_at(&b, 29), 0x1054, "high_pc");
    assert_eq!(u32_at(&b, 37), 5, "hist_size");
    assert_eq!(u32_at(&b, 41), 999, "prof_rate");
    assert_eq!(&b[45..60], b"seconds\0\0\0\0\0\0\0\0");
    assert_eq!(b[60], b's');
    let bins: Vec<u16> = b[61..]
        .chunks(2)
        .map(|c| u16::from_ne_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(bins, [0, 7, 65_535, 65_535, 1], "u16 counts, saturated");
    assert_eq!(b.len(), 61 + 2 * counts.len());
    #[cfg(target_endian = "little")]
    assert_eq!(&b[4..8], &[1, 0, 0, 0]);
}

#[test]
fn gmon_32_bit_pcs() {
    let b = gmon_out(0x8000, 0x8010, 100, &[3], 4);
    assert_eq!(b[20], 0);
    assert_eq!(u32_at(&b, 21), 0x8000);
    assert_eq!(u32_at(&b, 25), 0x8010);
    assert_eq!(u32_at(&b, 29), 1);
    assert_eq!(u32_at(&b, 33), 100);
    assert_eq!(b.len(), 20 + 1 + 4 + 4 + 4 + 4 + 15 + 1 + 2);
}

const TEXT: Text = Text {
    start: 0x1040,
    size: 0x1f3,
    pc_bytes: 8,
};

#[test]
fn explicit_layout_is_kept() {
    let l = Layout::derive(Some(0x400), Some(32768), Some(10), Some(TEXT), 1 << 20).unwrap();
    assert_eq!(
        l,
        Layout {
            offset: 0x400,
            scale: 32768,
            buckets: 10
        }
    );
    assert_eq!(l.high_pc(), 0x400 + 20);
    let l = Layout::derive(Some(0), Some(65536), Some(4), None, 1 << 20).unwrap();
    assert_eq!(l.high_pc(), 4);
}

#[test]
fn default_layout_covers_text_four_bytes_per_bucket() {
    let l = Layout::derive(None, None, None, Some(TEXT), 1 << 20).unwrap();
    assert_eq!(l.offset, 0x1040);
    assert_eq!(l.scale, 16384);
    assert_eq!(l.buckets, 0x1f3_u32.div_ceil(4));
    assert!(l.high_pc() >= TEXT.end());
    assert!(l.high_pc() < TEXT.end() + 4);
}

#[test]
fn scale_is_derived_from_buckets_to_cover_text() {
    for buckets in [1, 7, 100, 499, 500, 10_000] {
        let l = Layout::derive(None, None, Some(buckets), Some(TEXT), 1 << 20).unwrap();
        assert_eq!(l.buckets, buckets);
        assert!(l.scale >= 1 && l.scale <= 65536, "{l:?}");
        assert!(
            l.high_pc() >= TEXT.end(),
            "{buckets} buckets: {l:?} ends before .text"
        );
    }
    // Fewer buckets would cover twice as much: the scale is the largest that covers.
    let l = Layout::derive(None, None, Some(100), Some(TEXT), 1 << 20).unwrap();
    let tighter = Layout {
        scale: l.scale + 1,
        ..l
    };
    assert!(tighter.high_pc() < TEXT.end());
}

#[test]
fn buckets_are_derived_from_scale() {
    let l = Layout::derive(Some(0x1000), Some(65536), None, Some(TEXT), 1 << 20).unwrap();
    assert_eq!(l.buckets as u64, TEXT.end() - 0x1000);
    assert!(Layout::derive(None, Some(65536), None, Some(TEXT), 16).is_err());
}

#[test]
fn missing_layout_needs_binary() {
    let e = Layout::derive(None, Some(1), Some(1), None, 16)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--binary"), "{e}");
    assert!(Layout::derive(Some(0), None, Some(1), None, 16).is_err());
    assert!(Layout::derive(Some(0x5000), None, Some(4), Some(TEXT), 16).is_err());
}

#[test]
fn bucket_ranges_follow_profil() {
    let l = Layout {
        offset: 0x1000,
        scale: 16384,
        buckets: 8,
    };
    assert_eq!(l.bucket_range(0), (0x1000, 0x1004));
    assert_eq!(l.bucket_range(3), (0x100c, 0x1010));
    // A non-power-of-two scale: each PC in the range maps to the bucket.
    let l = Layout {
        offset: 0,
        scale: 3000,
        buckets: 50,
    };
    for b in 0..50u32 {
        let (lo, hi) = l.bucket_range(b);
        for pc in lo..hi {
            assert_eq!(pc * 3000 / 65536, u64::from(b));
        }
    }
}

#[test]
fn histogram_text_lists_non_empty_buckets() {
    let h = Histogram {
        layout: Layout {
            offset: 0x1000,
            scale: 16384,
            buckets: 4,
        },
        module: "split".into(),
        counts: vec![0, 30, 0, 10],
        out_of_range: 2,
        other: 5,
        frequency_hz: 999,
    };
    let t = histogram_text(&h);
    assert!(t.starts_with("histogram of split: offset 0x1000, scale 16384 (4 bytes per bucket), 4 buckets, PCs 0x1000..0x1010\n"), "{t}");
    assert!(
        t.contains("samples: 40 in range, 2 out of range, 5 outside the module (each 1/999 s)"),
        "{t}"
    );
    let rows: Vec<&str> = t.lines().skip(3).collect();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(
        rows[0].contains("0x1004..0x1008") && rows[0].contains("30") && rows[0].ends_with("75.0%"),
        "{t}"
    );
    assert!(
        rows[1].contains("0x100c..0x1010") && rows[1].ends_with("25.0%"),
        "{t}"
    );
}

#[test]
fn reads_text_of_an_elf_binary() {
    let exe = std::env::current_exe().unwrap();
    let t = read_text(&exe).unwrap();
    assert!(t.size > 0);
    assert_eq!(t.pc_bytes, 8);
    let e = read_text(Path::new("/nonexistent/binary")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/binary"));
}
