//! End-to-end tests of profd and profctl against the real kernel, one module
//! per area, sharing the `profd_e2e` support library (tests/src/). One area
//! runs with `cargo test -p profd-e2e --test e2e <area>::`.
//!
//! All areas run in this one process, so what the library makes once (the
//! test users, the built workloads, the scratch directory) serves them all.
//! Every test that starts a workload or a daemon holds the global lock
//! ([`profd_e2e::serial`]) while it runs, whichever area it is in: the
//! machine has few CPUs, and concurrent workloads would skew the measured
//! splits.

mod accounting;
mod big_answers;
mod bounds;
mod callers;
mod connections;
mod continuous;
mod dashboard;
mod debuginfod;
mod deploy;
mod faults;
mod fleet;
mod go;
mod history;
mod image;
mod interpreted;
mod interpreters;
mod jit;
mod jvm_ask;
mod kept;
mod kernel_frames;
mod kubernetes;
mod memory_limit;
mod names;
mod offcpu;
mod offcpu_rate;
mod perl;
mod planted;
mod python;
mod record;
mod restart;
mod ruby;
mod schedule;
mod scope;
mod security;
mod service;
mod sessions;
mod spool_failures;
mod stacks;
mod timeline;
mod trusted;
mod views;
