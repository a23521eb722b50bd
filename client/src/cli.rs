//! Command-line syntax (clap derive) and its validation into plain values;
//! no I/O and no daemon calls here.
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use profd_common::api;

/// Command-line client of the profd sampling profiler daemon.
#[derive(Debug, Parser)]
#[command(name = "profctl", version, about, propagate_version = true)]
pub struct Cli {
    /// Unix socket of the profd daemon.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "PROFD_SOCKET",
        default_value = profd_common::DEFAULT_SOCKET
    )]
    pub socket: PathBuf,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Profile a running process: live table while sampling, final profile at the end.
    Attach(AttachArgs),
    /// Start a command and profile it until it exits (or --duration elapses).
    Run(RunArgs),
    /// List the daemon's sessions, running and ended.
    Sessions,
    /// Stop a running session; its profile stays readable.
    Stop(StopArgs),
    /// Show daemon facts: version, CPUs, sampling event, kernel limits, totals.
    Info,
}

/// `profctl attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Process id to profile (all its threads).
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// How to sample and what to show.
    #[command(flatten)]
    pub options: ProfileOptions,
}

/// `profctl run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// How to sample and what to show.
    #[command(flatten)]
    pub options: ProfileOptions,
    /// The command to start and profile, with its arguments (after `--`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// `profctl stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// Session id (see `profctl sessions`).
    #[arg(value_name = "ID")]
    pub id: u64,
}

/// Options shared by `attach` and `run`.
#[derive(Debug, Clone, Args)]
pub struct ProfileOptions {
    /// Sampling frequency per CPU, in Hz [default: the daemon's, 999].
    #[arg(long, value_name = "HZ")]
    pub freq: Option<u32>,
    /// Stop after this many seconds (fractions allowed) [default: until the
    /// target exits or Ctrl-C].
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Seconds between live updates (at least 0.05).
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_interval)]
    pub interval: Duration,
    /// Rows to show, 0 = all [default: 20 in tables, all in JSON].
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Output format: live + final table, or one JSON document at the end.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Perf event that drives sampling (`cycles` needs a hardware PMU).
    #[arg(long, value_enum, default_value_t = EventArg::CpuClock)]
    pub event: EventArg,
    /// How user stacks are followed: `auto` gives complete stacks with or
    /// without frame pointers; `fp` is the kernel's frame-pointer walk
    /// (cheapest; callers of frameless code are lost); `dwarf` unwinds user
    /// stack copies with the binaries' CFI.
    #[arg(long, value_enum, default_value_t = UnwindArg::Auto)]
    pub unwind: UnwindArg,
    /// Bytes of user stack copied per sample for DWARF unwinding: a multiple
    /// of 8, at most 65528 [default: the daemon's, 16384].
    #[arg(long, value_name = "N")]
    pub stack_bytes: Option<u32>,
}

/// Rows shown in tables when `--top` is not given.
pub const DEFAULT_TOP: usize = 20;

impl ProfileOptions {
    /// The `AttachRequest` these options ask for.
    pub fn attach_request(&self, pid: u32) -> api::AttachRequest {
        api::AttachRequest {
            pid,
            frequency_hz: self.freq,
            duration_ms: self.duration.map_or(0, duration_ms),
            event: api::Event::from(self.event) as i32,
            unwind: api::Unwind::from(self.unwind) as i32,
            stack_bytes: self.stack_bytes.unwrap_or(0),
        }
    }

    /// Rows to show for the chosen format (`None` = all).
    pub fn row_limit(&self) -> Option<usize> {
        match (self.top, self.format) {
            (Some(0), _) => None,
            (Some(n), _) => Some(n),
            (None, Format::Table) => Some(DEFAULT_TOP),
            (None, Format::Json) => None,
        }
    }

    /// The Watch interval in milliseconds.
    pub fn interval_ms(&self) -> u32 {
        u32::try_from(self.interval.as_millis()).unwrap_or(u32::MAX)
    }
}

/// Output formats of `attach` and `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned text table.
    Table,
    /// One JSON document at the end.
    Json,
}

/// Sampling events, as perf spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EventArg {
    /// Software timer; always available.
    CpuClock,
    /// Hardware cycle counter; the daemon falls back to cpu-clock without a PMU.
    Cycles,
}

impl From<EventArg> for api::Event {
    fn from(e: EventArg) -> Self {
        match e {
            EventArg::CpuClock => api::Event::CpuClock,
            EventArg::Cycles => api::Event::Cycles,
        }
    }
}

/// User stack unwinding methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnwindArg {
    /// Complete stacks for code with or without frame pointers (the daemon
    /// picks the method).
    Auto,
    /// The kernel's frame-pointer walk.
    Fp,
    /// User stack copies unwound with DWARF CFI.
    Dwarf,
}

impl From<UnwindArg> for api::Unwind {
    fn from(u: UnwindArg) -> Self {
        match u {
            UnwindArg::Auto => api::Unwind::Auto,
            UnwindArg::Fp => api::Unwind::Fp,
            UnwindArg::Dwarf => api::Unwind::Dwarf,
        }
    }
}

/// Whole milliseconds in `d`, at least 1 for a non-zero duration.
fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("`{s}` must be a positive number of seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` seconds is too long"))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_seconds(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("`{s}` is shorter than a millisecond"));
    }
    Ok(d)
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_seconds(s)?;
    if d < Duration::from_millis(50) {
        return Err(format!(
            "`{s}` is shorter than the daemon's minimum, 0.05 s"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("profctl").chain(args.iter().copied()))
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn attach_defaults() {
        let cli = parse(&["attach", "1234"]).unwrap();
        let Command::Attach(a) = cli.command else {
            panic!("not attach")
        };
        assert_eq!(a.pid, 1234);
        let req = a.options.attach_request(a.pid);
        assert_eq!(req.pid, 1234);
        assert_eq!(req.frequency_hz, None);
        assert_eq!(req.duration_ms, 0);
        assert_eq!(req.event, api::Event::CpuClock as i32);
        assert_eq!(req.unwind, api::Unwind::Auto as i32);
        assert_eq!(req.stack_bytes, 0);
        assert_eq!(a.options.interval_ms(), 1000);
        assert_eq!(a.options.row_limit(), Some(DEFAULT_TOP));
    }

    #[test]
    fn attach_options() {
        let cli = parse(&[
            "attach",
            "7",
            "--freq",
            "99",
            "--duration",
            "1.5",
            "--interval",
            "0.25",
            "--top",
            "0",
            "--format",
            "json",
            "--event",
            "cycles",
            "--unwind",
            "dwarf",
            "--stack-bytes",
            "8192",
        ])
        .unwrap();
        let Command::Attach(a) = cli.command else {
            panic!("not attach")
        };
        let req = a.options.attach_request(7);
        assert_eq!(req.frequency_hz, Some(99));
        assert_eq!(req.duration_ms, 1500);
        assert_eq!(req.event, api::Event::Cycles as i32);
        assert_eq!(req.unwind, api::Unwind::Dwarf as i32);
        assert_eq!(req.stack_bytes, 8192);
        assert_eq!(a.options.interval_ms(), 250);
        assert_eq!(a.options.row_limit(), None);
        assert_eq!(a.options.format, Format::Json);
    }

    #[test]
    fn unwind_modes() {
        for (arg, want) in [
            ("auto", api::Unwind::Auto),
            ("fp", api::Unwind::Fp),
            ("dwarf", api::Unwind::Dwarf),
        ] {
            let cli = parse(&["run", "--unwind", arg, "--", "true"]).unwrap();
            let Command::Run(r) = cli.command else {
                panic!("not run")
            };
            assert_eq!(r.options.attach_request(1).unwind, want as i32, "{arg}");
        }
    }

    #[test]
    fn json_shows_all_rows_unless_top_given() {
        let cli = parse(&["attach", "7", "--format", "json"]).unwrap();
        let Command::Attach(a) = cli.command else {
            panic!("not attach")
        };
        assert_eq!(a.options.row_limit(), None);
        let cli = parse(&["attach", "7", "--format", "json", "--top", "5"]).unwrap();
        let Command::Attach(a) = cli.command else {
            panic!("not attach")
        };
        assert_eq!(a.options.row_limit(), Some(5));
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            &["attach", "7", "--freq", "abc"][..],
            &["attach", "7", "--duration", "-1"],
            &["attach", "7", "--duration", "nan"],
            &["attach", "7", "--interval", "0.01"],
            &["attach", "7", "--unwind", "lbr"],
            &["attach", "7", "--stack-bytes", "-8"],
            &["attach", "7", "--stack-bytes", "16k"],
            &["attach", "x"],
            &["run"],
            &["stop"],
        ] {
            assert!(parse(args).is_err(), "{args:?} parsed");
        }
    }

    #[test]
    fn run_takes_the_command_after_dashes() {
        let cli = parse(&["run", "--freq", "99", "--", "sh", "-c", "echo hi", "--freq"]).unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        assert_eq!(r.options.freq, Some(99));
        assert_eq!(r.command, ["sh", "-c", "echo hi", "--freq"]);
    }

    #[test]
    fn run_without_dashes() {
        let cli = parse(&["run", "--duration", "2", "sleep", "1"]).unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        assert_eq!(r.options.duration, Some(Duration::from_secs(2)));
        assert_eq!(r.command, ["sleep", "1"]);
    }

    #[test]
    fn socket_option_is_global() {
        let cli = parse(&["sessions", "--socket", "/tmp/x.sock"]).unwrap();
        assert_eq!(cli.socket, PathBuf::from("/tmp/x.sock"));
        let cli = parse(&["--socket", "/tmp/y.sock", "info"]).unwrap();
        assert_eq!(cli.socket, PathBuf::from("/tmp/y.sock"));
    }
}
