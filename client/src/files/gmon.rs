//! profil(3) histograms on the client side: choosing offset, scale and
//! bucket count (from a binary's `.text` when asked), printing a histogram,
//! and encoding it as a BSD `gmon.out` that `gprof` reads. No daemon calls;
//! the only I/O is reading the binary.
use std::fmt::Write as _;
use std::path::Path;

use object::{Object, ObjectSection};

use crate::error::{Error, LayoutError};

/// `gmon.out`'s magic cookie.
pub const GMON_MAGIC: &[u8; 4] = b"gmon";
/// The `gmon.out` version gprof reads.
pub const GMON_VERSION: u32 = 1;
/// Record tag of a PC histogram.
pub const GMON_TAG_TIME_HIST: u8 = 0;
/// Bytes of the file header: magic, version, three spare words.
pub const GMON_HEADER_LEN: usize = 20;
/// profil's unit scale: one bucket per byte.
pub const SCALE_ONE: u64 = 65536;
/// Bytes of code per bucket when nothing else is asked (glibc's gmon uses as much).
pub const DEFAULT_BYTES_PER_BUCKET: u64 = 4;

/// A binary's code section: where it starts, how long it is, how wide its
/// addresses are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text {
    /// ELF virtual address of `.text`.
    pub start: u64,
    /// Its size in bytes.
    pub size: u64,
    /// 8 for a 64-bit binary, 4 for a 32-bit one.
    pub pc_bytes: usize,
}

impl Text {
    /// The end of `.text` (exclusive).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }
}

/// Reads `.text` of the ELF binary at `path`.
pub fn read_text(path: &Path) -> Result<Text, Error> {
    let bad = |reason: String| Error::BadFile {
        path: path.to_path_buf(),
        reason,
    };
    let data = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let file = object::File::parse(&*data).map_err(|e| bad(format!("not an ELF binary: {e}")))?;
    let text = file
        .section_by_name(".text")
        .ok_or_else(|| bad("it has no .text section".into()))?;
    if text.size() == 0 {
        return Err(bad("its .text section is empty".into()));
    }
    Ok(Text {
        start: text.address(),
        size: text.size(),
        pc_bytes: if file.is_64() { 8 } else { 4 },
    })
}

/// What a histogram counts: PCs from `offset`, `scale` (16.16 fixed point)
/// and the number of buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Subtracted from each PC.
    pub offset: u64,
    /// 65536 = one bucket per byte.
    pub scale: u32,
    /// Number of buckets.
    pub buckets: u32,
}

impl Layout {
    /// Fills what was not given from `.text`: the offset is its start; with a
    /// bucket count the scale is the largest that covers it, with a scale the
    /// bucket count is the smallest that does, with neither one bucket per
    /// [`DEFAULT_BYTES_PER_BUCKET`] bytes.
    pub fn derive(
        offset: Option<u64>,
        scale: Option<u32>,
        buckets: Option<u32>,
        text: Option<Text>,
        max_buckets: u32,
    ) -> Result<Layout, LayoutError> {
        let offset = match (offset, text) {
            (Some(o), _) => o,
            (None, Some(t)) => t.start,
            (None, None) => return Err(LayoutError::NeedBinary),
        };
        if let (Some(scale), Some(buckets)) = (scale, buckets) {
            return Ok(Layout {
                offset,
                scale,
                buckets,
            });
        }
        let text = text.ok_or(LayoutError::NeedBinary)?;
        // Bytes from the offset to the end of .text.
        let span = text.end().checked_sub(offset).filter(|&s| s > 0).ok_or(
            LayoutError::OffsetPastText {
                offset,
                end: text.end(),
            },
        )?;
        let (scale, buckets) = match (scale, buckets) {
            (Some(scale), None) => {
                let buckets =
                    (u128::from(span) * u128::from(scale)).div_ceil(u128::from(SCALE_ONE));
                let buckets = u32::try_from(buckets)
                    .ok()
                    .filter(|&b| b <= max_buckets)
                    .ok_or(LayoutError::ScaleNeedsTooMany {
                        scale,
                        buckets,
                        max_buckets,
                    })?;
                (scale, buckets.max(1))
            }
            (None, Some(buckets)) => {
                let scale = (u128::from(buckets) * u128::from(SCALE_ONE) / u128::from(span))
                    .min(u128::from(SCALE_ONE));
                if scale == 0 {
                    return Err(LayoutError::TooFewBuckets { buckets, span });
                }
                (scale as u32, buckets)
            }
            _ => {
                let buckets = span.div_ceil(DEFAULT_BYTES_PER_BUCKET);
                let buckets = u32::try_from(buckets)
                    .ok()
                    .filter(|&b| b <= max_buckets)
                    .ok_or(LayoutError::TextTooLarge { max_buckets })?;
                ((SCALE_ONE / DEFAULT_BYTES_PER_BUCKET) as u32, buckets)
            }
        };
        Ok(Layout {
            offset,
            scale,
            buckets,
        })
    }

    /// The first PC past the last bucket: offset + buckets × 65536 / scale.
    pub fn high_pc(&self) -> u64 {
        let span = u128::from(self.buckets) * u128::from(SCALE_ONE) / u128::from(self.scale.max(1));
        self.offset
            .saturating_add(u64::try_from(span).unwrap_or(u64::MAX))
    }

    /// The PCs counted in `bucket`: from the first whose bucket is this one
    /// to the first of the next.
    pub fn bucket_range(&self, bucket: u32) -> (u64, u64) {
        (self.first_pc(bucket), self.first_pc(bucket + 1))
    }

    /// The lowest PC with (pc − offset) × scale / 65536 ≥ bucket.
    fn first_pc(&self, bucket: u32) -> u64 {
        let scale = u128::from(self.scale.max(1));
        let delta = (u128::from(bucket) * u128::from(SCALE_ONE)).div_ceil(scale);
        self.offset
            .saturating_add(u64::try_from(delta).unwrap_or(u64::MAX))
    }
}

/// A `gmon.out` holding one PC histogram record: the 20-byte header (magic
/// "gmon", version 1, 12 spare bytes), tag 0, low_pc and high_pc (`pc_bytes`
/// wide), hist_size (the bucket count), prof_rate (Hz), the dimension
/// "seconds" (15 bytes, zero-padded) and its abbreviation 's', then one u16
/// per bucket, saturated at 65535. Numbers in this machine's byte order (the
/// profiled binary's).
pub fn gmon_out(
    low_pc: u64,
    high_pc: u64,
    prof_rate: u32,
    counts: &[u64],
    pc_bytes: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(GMON_HEADER_LEN + 1 + 2 * 8 + 24 + 2 * counts.len());
    out.extend_from_slice(GMON_MAGIC);
    out.extend_from_slice(&GMON_VERSION.to_ne_bytes());
    out.extend_from_slice(&[0; 12]);
    out.push(GMON_TAG_TIME_HIST);
    let pc = |out: &mut Vec<u8>, v: u64| {
        if pc_bytes == 4 {
            out.extend_from_slice(&(v as u32).to_ne_bytes());
        } else {
            out.extend_from_slice(&v.to_ne_bytes());
        }
    };
    pc(&mut out, low_pc);
    pc(&mut out, high_pc);
    let hist_size = u32::try_from(counts.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&hist_size.to_ne_bytes());
    out.extend_from_slice(&prof_rate.to_ne_bytes());
    let mut dimen = [0u8; 15];
    dimen[..7].copy_from_slice(b"seconds");
    out.extend_from_slice(&dimen);
    out.push(b's');
    for &c in counts.iter().take(hist_size as usize) {
        out.extend_from_slice(&(c.min(u64::from(u16::MAX)) as u16).to_ne_bytes());
    }
    out
}

/// The figures of a histogram reply, for printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    /// What was asked.
    pub layout: Layout,
    /// The module.
    pub module: String,
    /// Count per bucket.
    pub counts: Vec<u64>,
    /// Samples in the module beyond the last bucket (or before the offset).
    pub out_of_range: u64,
    /// Samples outside the module.
    pub other: u64,
    /// Each count stands for 1/frequency_hz seconds.
    pub frequency_hz: u32,
}

/// The histogram as text: a line on the layout, the sample totals, then one
/// line per non-empty bucket with its PC range, count and share.
pub fn histogram_text(h: &Histogram) -> String {
    let l = h.layout;
    let in_range: u64 = h.counts.iter().sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "histogram of {}: offset {:#x}, scale {} ({} bytes per bucket), {} buckets, PCs {:#x}..{:#x}",
        h.module,
        l.offset,
        l.scale,
        format_bytes_per_bucket(l.scale),
        l.buckets,
        l.offset,
        l.high_pc()
    );
    let _ = writeln!(
        out,
        "samples: {in_range} in range, {} out of range, {} outside the module (each 1/{} s)",
        h.out_of_range, h.other, h.frequency_hz
    );
    let w = h
        .counts
        .iter()
        .max()
        .copied()
        .unwrap_or(0)
        .to_string()
        .len()
        .max(5);
    let _ = writeln!(
        out,
        "{:>8}  {:<37}  {:>w$}  {:>6}",
        "BUCKET", "PC RANGE", "COUNT", "PCT"
    );
    let mut any = false;
    for (i, &count) in h.counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        any = true;
        let (lo, hi) = l.bucket_range(i as u32);
        let _ = writeln!(
            out,
            "{i:>8}  {:<37}  {count:>w$}  {:>5.1}%",
            format!("{lo:#x}..{hi:#x}"),
            crate::views::ranking::percent(count, in_range)
        );
    }
    if !any {
        out.push_str("(no samples in range)\n");
    }
    out
}

fn format_bytes_per_bucket(scale: u32) -> String {
    let bytes = SCALE_ONE as f64 / f64::from(scale.max(1));
    if bytes.fract() == 0.0 {
        format!("{bytes:.0}")
    } else {
        format!("{bytes:.3}")
    }
}

#[cfg(test)]
#[path = "gmon_tests.rs"]
mod tests;
