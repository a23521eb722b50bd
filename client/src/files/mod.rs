//! The files profctl reads and writes: output files written safely, saved
//! pprof profiles viewed without a daemon, `gmon.out` histograms, and the
//! debug files that name stripped code off the host.
pub mod gmon;
pub mod out_file;
pub mod pprof_file;
pub mod symbols;
