//! Which kernel frames each caller is shown (`--kernel-frames`): the
//! setting, and the kernel's own rule for who may see kernel addresses
//! (`kptr_restrict`, `perf_event_paranoid`) applied to a caller. How a
//! profile is then changed lives in `profd_common::kernel`.
use crate::os::sysctl::kernel_sysctl;
use profd_common::kernel::KernelFrames;

/// The `--kernel-frames` setting: what callers other than root are shown
/// of kernel frames (root is always shown everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Setting {
    /// As the kernel would show them to the caller (see [`Setting::shown`]).
    #[default]
    Auto,
    Full,
    Names,
    Folded,
}

/// The values the setting takes, as written.
pub const VALUES: &str = "\"auto\", \"full\", \"names\" or \"folded\"";

/// A value the setting does not take.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected {VALUES}, got {0:?}")]
pub struct UnknownSetting(pub String);

impl std::str::FromStr for Setting {
    type Err = UnknownSetting;

    fn from_str(s: &str) -> Result<Setting, UnknownSetting> {
        match s {
            "auto" => Ok(Setting::Auto),
            "full" => Ok(Setting::Full),
            "names" => Ok(Setting::Names),
            "folded" => Ok(Setting::Folded),
            _ => Err(UnknownSetting(s.to_string())),
        }
    }
}

/// The kernel's settings the rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sysctls {
    pub kptr_restrict: i64,
    pub perf_event_paranoid: i64,
}

impl Sysctls {
    /// The current values; one that cannot be read counts as its most
    /// restrictive value.
    pub fn read() -> Sysctls {
        Sysctls {
            kptr_restrict: kernel_sysctl("kptr_restrict").unwrap_or(2),
            perf_event_paranoid: kernel_sysctl("perf_event_paranoid").unwrap_or(3),
        }
    }
}

impl Setting {
    /// What a caller (root or not) is shown. Root sees everything. For
    /// anyone else, `Auto` follows the kernel: a caller it would not let
    /// sample the kernel (`perf_event_paranoid` ≥ 2 without privileges)
    /// gets one `[kernel]` frame; one to whom `/proc/kallsyms` shows
    /// addresses (`kptr_restrict` 0 with `perf_event_paranoid` ≤ 1) gets
    /// everything; any other gets names without addresses.
    pub fn shown(self, root: bool, sysctls: impl FnOnce() -> Sysctls) -> KernelFrames {
        if root {
            return KernelFrames::Full;
        }
        match self {
            Setting::Full => KernelFrames::Full,
            Setting::Names => KernelFrames::Names,
            Setting::Folded => KernelFrames::Folded,
            Setting::Auto => {
                let s = sysctls();
                if s.perf_event_paranoid >= 2 {
                    KernelFrames::Folded
                } else if s.kptr_restrict == 0 {
                    KernelFrames::Full
                } else {
                    KernelFrames::Names
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysctls(kptr_restrict: i64, perf_event_paranoid: i64) -> impl FnOnce() -> Sysctls {
        move || Sysctls {
            kptr_restrict,
            perf_event_paranoid,
        }
    }

    #[test]
    fn auto_follows_the_kernel_for_unprivileged_callers() {
        let auto = |k, p| Setting::Auto.shown(false, sysctls(k, p));
        // perf_event_open would exclude the kernel for them.
        for k in 0..=2 {
            assert_eq!(auto(k, 2), KernelFrames::Folded);
            assert_eq!(auto(k, 3), KernelFrames::Folded);
            assert_eq!(auto(k, 4), KernelFrames::Folded);
        }
        // Kernel samples allowed: /proc/kallsyms shows them addresses only
        // with kptr_restrict 0.
        for p in [-1, 0, 1] {
            assert_eq!(auto(0, p), KernelFrames::Full);
            assert_eq!(auto(1, p), KernelFrames::Names);
            assert_eq!(auto(2, p), KernelFrames::Names);
        }
    }

    #[test]
    fn root_sees_everything_and_others_what_is_set() {
        for setting in [
            Setting::Auto,
            Setting::Full,
            Setting::Names,
            Setting::Folded,
        ] {
            let shown = setting.shown(true, || panic!("root needs no sysctl"));
            assert_eq!(shown, KernelFrames::Full, "{setting:?}");
        }
        let other = |s: Setting| s.shown(false, sysctls(0, 2));
        assert_eq!(other(Setting::Full), KernelFrames::Full);
        assert_eq!(other(Setting::Names), KernelFrames::Names);
        assert_eq!(other(Setting::Folded), KernelFrames::Folded);
    }

    #[test]
    fn values_parse() {
        assert_eq!("auto".parse(), Ok(Setting::Auto));
        assert_eq!("folded".parse(), Ok(Setting::Folded));
        let err = "hidden".parse::<Setting>().unwrap_err().to_string();
        assert!(
            err.contains("\"auto\", \"full\", \"names\" or \"folded\""),
            "{err}"
        );
    }
}
