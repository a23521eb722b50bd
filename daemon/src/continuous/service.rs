//! A process's service label from its cgroup path (systemd unit, container
//! id, last path component) or its command name, and the selectors that
//! choose which processes continuous profiling samples.

/// One selector of `[continuous] select` (a process is profiled when any
/// selector matches it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {}
