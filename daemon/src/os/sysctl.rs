//! The kernel's integer settings under /proc/sys/kernel that the daemon
//! reads: its sampling rate limit and who may see kernel addresses.

/// Read an integer sysctl under /proc/sys/kernel.
pub fn kernel_sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The highest sampling frequency the kernel accepts right now (it lowers it
/// by itself when sampling interrupts take too long).
pub fn max_sample_rate() -> u32 {
    kernel_sysctl("perf_event_max_sample_rate")
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(100_000)
}
