//! The files profctl reads and writes: output files written safely, saved
//! pprof profiles viewed without a daemon, and `gmon.out` histograms.
pub mod gmon;
pub mod out_file;
pub mod pprof_file;
