//! Why `profctl histogram`'s flags give no layout of the histogram's
//! buckets (see `files::gmon::Layout::derive`).

/// Why no histogram layout follows from the flags; each message says what
/// to give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Neither all three of offset, scale and buckets, nor a binary.
    #[error("--offset, --scale and --buckets are needed, or --binary to derive them")]
    NeedBinary,
    /// The offset is at or past the end of `.text`.
    #[error("--offset {offset:#x} is not below the end of .text ({end:#x})")]
    OffsetPastText {
        /// `--offset`.
        offset: u64,
        /// The end of `.text`.
        end: u64,
    },
    /// The scale needs more buckets than allowed to cover `.text`.
    #[error("--scale {scale} needs {buckets} buckets to cover .text, more than {max_buckets}")]
    ScaleNeedsTooMany {
        /// `--scale`.
        scale: u32,
        /// The buckets it needs.
        buckets: u128,
        /// The most allowed.
        max_buckets: u32,
    },
    /// Too few buckets for `.text`, even at the coarsest scale.
    #[error(
        "{buckets} buckets cannot cover the {span} bytes of .text (at most 65536 bytes per bucket)"
    )]
    TooFewBuckets {
        /// `--buckets`.
        buckets: u32,
        /// Bytes from the offset to the end of `.text`.
        span: u64,
    },
    /// `.text` needs more buckets of 4 bytes than allowed.
    #[error(".text is too large for {max_buckets} buckets of 4 bytes; give --scale")]
    TextTooLarge {
        /// The most allowed.
        max_buckets: u32,
    },
}
