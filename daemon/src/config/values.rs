//! The value types of settings: for each, the one check a value of the
//! settings file and a flag's text both go through (so both say the same
//! thing), and how a checked value is written back.
use crate::serve::auth::Grant;
use crate::sessions::store::parse_bytes;
use clap::ValueHint;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use toml::Value;

/// Longest retention in days (a century).
const MAX_RETAIN_DAYS: f64 = 36500.0;

/// Why a value (of the file, or a flag's text) is not one a setting takes.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// Not a value of the setting's type: what it takes, and what it got.
    #[error("expected {what}, got {got}")]
    Expected { what: String, got: Value },
    /// A grant naming no group and user of this machine.
    #[error(transparent)]
    Grant(#[from] crate::serve::auth::GrantError),
    /// A selector that is not one.
    #[error(transparent)]
    Selector(#[from] crate::continuous::service::SelectorError),
}

/// Equal when they say the same: the parsers' errors keep sources that
/// cannot be compared.
impl PartialEq for ValueError {
    fn eq(&self, other: &ValueError) -> bool {
        self.to_string() == other.to_string()
    }
}

/// A value that is not what a key takes: says what it takes and what it got.
pub(super) fn expected(what: &str, got: &Value) -> ValueError {
    ValueError::Expected {
        what: what.to_string(),
        got: got.clone(),
    }
}

/// A value type: the check of a value (shared by the file and the flags),
/// how a checked value is written, and how a flag's text reads.
pub struct Type<T> {
    pub check: fn(&Value) -> Result<T, ValueError>,
    /// The value as the file writes it.
    pub show: fn(&T) -> Value,
    /// A flag's text as the file would write it.
    pub text: fn(&str) -> Value,
    /// A list: its flag is repeated, each giving one item, and the flags
    /// given replace the file's whole list.
    pub list: bool,
    /// What shells complete the flag's value with.
    pub hint: ValueHint,
}

impl<T> Type<T> {
    /// Check a value and write it as the file does.
    pub fn read(&self, v: &Value) -> Result<Value, ValueError> {
        (self.check)(v).map(|t| (self.show)(&t))
    }

    /// Check a flag's text (for a list, one item) as the file's value.
    pub fn flag(&self, text: &str) -> Result<Value, ValueError> {
        let v = (self.text)(text);
        if self.list {
            self.read(&Value::Array(vec![v.clone()])).map(|_| v)
        } else {
            self.read(&v)
        }
    }
}

/// A flag's text as the file would write a number: an integer, a float, or
/// else a string.
fn number(text: &str) -> Value {
    if let Ok(n) = text.parse::<i64>() {
        Value::Integer(n)
    } else if let Ok(f) = text.parse::<f64>() {
        Value::Float(f)
    } else {
        Value::String(text.to_string())
    }
}

/// A flag's text as a string value.
fn string(text: &str) -> Value {
    Value::String(text.to_string())
}

const fn scalar<T>(
    check: fn(&Value) -> Result<T, ValueError>,
    show: fn(&T) -> Value,
    text: fn(&str) -> Value,
) -> Type<T> {
    Type {
        check,
        show,
        text,
        list: false,
        hint: ValueHint::Unknown,
    }
}

/// An integer above 0 (counts and limits).
pub const POSITIVE: Type<usize> = scalar(
    |v| match v {
        Value::Integer(n) if *n > 0 => {
            usize::try_from(*n).map_err(|_| expected("a positive integer", v))
        }
        _ => Err(expected("a positive integer", v)),
    },
    |n| Value::Integer(*n as i64),
    number,
);

/// Most histogram buckets one request may ask for (the daemon's limit
/// `--max-histogram-buckets` may be lower).
pub const MAX_BUCKETS: u32 = 1 << 24;

/// A number of histogram buckets profd can answer with at all.
pub const BUCKETS: Type<u32> = scalar(
    |v| {
        let max = MAX_BUCKETS;
        match v {
            Value::Integer(n) if *n > 0 && *n <= i64::from(max) => Ok(*n as u32),
            _ => Err(expected(&format!("a number of buckets from 1 to {max}"), v)),
        }
    },
    |n| Value::Integer(i64::from(*n)),
    number,
);

/// A sampling frequency the kernel allows.
pub const FREQUENCY: Type<u32> = scalar(
    |v| {
        let max = crate::os::sysctl::max_sample_rate();
        match v {
            Value::Integer(n) if *n > 0 && *n <= i64::from(max) => Ok(*n as u32),
            _ => Err(expected(
                &format!(
                    "a frequency in Hz from 1 to {max} (the kernel's perf_event_max_sample_rate)"
                ),
                v,
            )),
        }
    },
    |n| Value::Integer(i64::from(*n)),
    number,
);

/// Bytes of user stack a sample copies: a multiple of 8 up to the
/// kernel's largest copy, or 0 for frame-pointer call chains.
pub const STACK_BYTES: Type<u32> = scalar(
    |v| {
        let max = crate::os::perf::MAX_STACK_BYTES;
        match v {
            Value::Integer(n) if *n >= 0 && *n <= i64::from(max) && n % 8 == 0 => Ok(*n as u32),
            _ => Err(expected(
                &format!(
                    "bytes of stack to copy: a multiple of 8 up to {max} (the kernel's largest), or 0 for frame pointers"
                ),
                v,
            )),
        }
    },
    |n| Value::Integer(i64::from(*n)),
    number,
);

/// Whole seconds above 0.
pub const SECONDS: Type<u64> = scalar(
    |v| match v {
        Value::Integer(n) if *n > 0 => Ok(*n as u64),
        _ => Err(expected("a positive number of seconds", v)),
    },
    |n| Value::Integer(*n as i64),
    number,
);

/// Milliseconds of CPU a second: 1 to 1000.
pub const MILLIS_PER_SECOND: Type<u64> = scalar(
    |v| match v {
        Value::Integer(n) if (1..=1000).contains(n) => Ok(*n as u64),
        _ => Err(expected(
            "milliseconds of CPU a second, from 1 to 1000 (a whole core)",
            v,
        )),
    },
    |n| Value::Integer(*n as i64),
    number,
);

/// Ring data pages: a power of two (the kernel's rule).
pub const RING_PAGES: Type<usize> = scalar(
    |v| match v {
        Value::Integer(n) if *n > 0 && (*n as u64).is_power_of_two() && *n <= 1 << 20 => {
            Ok(*n as usize)
        }
        _ => Err(expected(
            "a power of two (1, 2, 4, ... 1048576: the kernel's rule)",
            v,
        )),
    },
    |n| Value::Integer(*n as i64),
    number,
);

/// Days, fractions allowed.
pub const DAYS: Type<f64> = scalar(
    |v| {
        let d = match v {
            Value::Integer(n) => *n as f64,
            Value::Float(f) => *f,
            _ => f64::NAN,
        };
        if d.is_finite() && d > 0.0 && d <= MAX_RETAIN_DAYS {
            Ok(d)
        } else {
            Err(expected(
                &format!("a number of days above 0 (fractions allowed), at most {MAX_RETAIN_DAYS}"),
                v,
            ))
        }
    },
    |d| Value::Float(*d),
    number,
);

/// A size above 0: bytes, or a string with K, M, G or T (powers of 1024).
pub const BYTES: Type<u64> = scalar(
    |v| {
        let what = "a size above 0, such as 1073741824 or \"512M\" (K, M, G, T: powers of 1024)";
        match v {
            Value::Integer(n) if *n > 0 => Ok(*n as u64),
            Value::String(s) => match parse_bytes(s) {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(expected(what, v)),
            },
            _ => Err(expected(what, v)),
        }
    },
    |n| Value::Integer(*n as i64),
    number,
);

/// A share of a fleet, above 0 and at most 1: a number, or a string of
/// percent such as "10%".
pub const FRACTION: Type<f64> = scalar(
    |v| {
        let f = match v {
            Value::Float(f) => Some(*f),
            Value::Integer(n) => Some(*n as f64),
            Value::String(s) => s
                .trim()
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<f64>().ok())
                .map(|p| p / 100.0),
            _ => None,
        };
        match f {
            Some(f) if f.is_finite() && f > 0.0 && f <= 1.0 => Ok(f),
            _ => Err(expected(
                "a share above 0 and at most 1, such as 0.1 or \"10%\"",
                v,
            )),
        }
    },
    |f| Value::Float(*f),
    number,
);

/// Longest continuous window in seconds (an hour).
pub const MAX_WINDOW_SECS: u64 = 3600;

/// Whole seconds of a continuous window, 1 to an hour.
pub const WINDOW: Type<u64> = scalar(
    |v| match v {
        Value::Integer(n) if *n > 0 && *n as u64 <= MAX_WINDOW_SECS => Ok(*n as u64),
        _ => Err(expected(
            &format!("a number of seconds from 1 to {MAX_WINDOW_SECS}"),
            v,
        )),
    },
    |n| Value::Integer(*n as i64),
    number,
);

/// Least continuous history in bytes: a few windows of a busy host.
pub const MIN_HISTORY_BYTES: u64 = 1 << 20;

/// A size of at least 1 MiB: bytes, or a string with K, M, G or T.
pub const HISTORY_BYTES: Type<u64> = scalar(
    |v| {
        let what =
            "a size of at least 1M, such as 268435456 or \"256M\" (K, M, G, T: powers of 1024)";
        let n = match v {
            Value::Integer(n) if *n > 0 => Some(*n as u64),
            Value::String(s) => parse_bytes(s).ok(),
            _ => None,
        };
        match n {
            Some(n) if n >= MIN_HISTORY_BYTES => Ok(n),
            _ => Err(expected(what, v)),
        }
    },
    |n| match n {
        n if n.is_multiple_of(1 << 30) => Value::String(format!("{}G", n >> 30)),
        n if n.is_multiple_of(1 << 20) => Value::String(format!("{}M", n >> 20)),
        n => Value::Integer(*n as i64),
    },
    number,
);

/// A memory ceiling of at least [`crate::memory::MIN_LIMIT`]: bytes, or a
/// string with K, M, G or T.
pub const MEMORY_BYTES: Type<u64> = scalar(
    |v| {
        let what =
            "a size of at least 32M, such as 134217728 or \"128M\" (K, M, G, T: powers of 1024)";
        let n = match v {
            Value::Integer(n) if *n > 0 => Some(*n as u64),
            Value::String(s) => parse_bytes(s).ok(),
            _ => None,
        };
        match n {
            Some(n) if n >= crate::memory::MIN_LIMIT => Ok(n),
            _ => Err(expected(what, v)),
        }
    },
    |n| match n {
        n if n.is_multiple_of(1 << 30) => Value::String(format!("{}G", n >> 30)),
        n if n.is_multiple_of(1 << 20) => Value::String(format!("{}M", n >> 20)),
        n => Value::Integer(*n as i64),
    },
    number,
);

/// Units a duration is shown in, largest first.
const DURATION_UNITS: &[(u64, &str)] = &[(86400, "d"), (3600, "h"), (60, "m"), (1, "s")];

/// A duration: whole seconds, or a string such as "7d", "12h" or "1h 30m"
/// (units s, m, h, d, w), from a second to a century.
pub const DURATION: Type<Duration> = scalar(
    |v| {
        let what =
            "a duration such as \"7d\", \"12h\" or \"90m\" (or whole seconds), at most 36500d";
        let d = match v {
            Value::Integer(n) if *n > 0 => Some(Duration::from_secs(*n as u64)),
            Value::String(s) => humantime::parse_duration(s.trim()).ok(),
            _ => None,
        };
        match d {
            Some(d)
                if d.as_secs() > 0
                    && d.subsec_nanos() == 0
                    && d.as_secs_f64() <= MAX_RETAIN_DAYS * 86400.0 =>
            {
                Ok(d)
            }
            _ => Err(expected(what, v)),
        }
    },
    |d| Value::String(show_duration(*d)),
    number,
);

/// A whole-second duration in its largest exact unit: `7d`, `90m`, `45s`.
pub fn show_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (size, unit) = DURATION_UNITS
        .iter()
        .find(|(size, _)| secs.is_multiple_of(*size))
        .copied()
        .unwrap_or((1, "s"));
    format!("{}{unit}", secs / size)
}

/// A log level, written in lower case.
pub const LOG_LEVEL: Type<String> = scalar(
    |v| match v {
        Value::String(s) if s.parse::<tracing::Level>().is_ok() => Ok(s.to_ascii_lowercase()),
        _ => Err(expected(
            "one of \"error\", \"warn\", \"info\", \"debug\", \"trace\"",
            v,
        )),
    },
    |s| Value::String(s.clone()),
    string,
);

/// What callers other than root are shown of kernel frames.
pub const KERNEL_FRAMES: Type<String> = scalar(
    |v| match v {
        Value::String(s) if s.parse::<crate::serve::kernel_view::Setting>().is_ok() => {
            Ok(s.clone())
        }
        _ => Err(expected(crate::serve::kernel_view::VALUES, v)),
    },
    |s| Value::String(s.clone()),
    string,
);

/// An address and port, such as `127.0.0.1:9464` or `[::1]:9464`.
pub const ADDR: Type<SocketAddr> = scalar(
    |v| {
        let what = "an address and port such as \"127.0.0.1:9464\"";
        match v {
            Value::String(s) => s.parse().map_err(|_| expected(what, v)),
            _ => Err(expected(what, v)),
        }
    },
    |a| Value::String(a.to_string()),
    string,
);

/// true or false.
pub const BOOL: Type<bool> = scalar(
    |v| match v {
        Value::Boolean(b) => Ok(*b),
        _ => Err(expected("true or false", v)),
    },
    |b| Value::Boolean(*b),
    string,
);

/// A path (a non-empty string).
pub const PATH: Type<PathBuf> = Type {
    hint: ValueHint::AnyPath,
    ..scalar(
        |v| match v {
            Value::String(s) if !s.is_empty() => Ok(PathBuf::from(s)),
            _ => Err(expected("a path (a non-empty string)", v)),
        },
        |p| Value::String(p.display().to_string()),
        string,
    )
};

/// An absolute path.
pub const ABSOLUTE_PATH: Type<PathBuf> = Type {
    hint: ValueHint::DirPath,
    ..scalar(
        |v| match v {
            Value::String(s) if s.starts_with('/') => Ok(PathBuf::from(s)),
            _ => Err(expected("an absolute path (starting with /)", v)),
        },
        |p| Value::String(p.display().to_string()),
        string,
    )
};

/// A name (a non-empty string), such as a group's.
pub const NAME: Type<String> = scalar(
    |v| match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        _ => Err(expected("a name (a non-empty string)", v)),
    },
    |s| Value::String(s.clone()),
    string,
);

/// A list of strings, each checked by `item`; a flag gives one item.
const fn list(check: fn(&Value) -> Result<Vec<String>, ValueError>) -> Type<Vec<String>> {
    Type {
        check,
        show: |items| Value::Array(items.iter().cloned().map(Value::String).collect()),
        text: string,
        list: true,
        hint: ValueHint::Unknown,
    }
}

/// A grant `GROUP:USER` naming a group and a user of this machine.
fn grant(v: &Value) -> Result<String, ValueError> {
    match v {
        Value::String(s) => s
            .parse::<Grant>()
            .map(|_| s.clone())
            .map_err(ValueError::Grant),
        _ => Err(expected("a grant \"GROUP:USER\"", v)),
    }
}

/// Grants `GROUP:USER`.
pub const GRANTS: Type<Vec<String>> = list(|v| match v {
    Value::Array(items) => items.iter().map(grant).collect(),
    _ => Err(expected("a list of grants such as [\"GROUP:USER\"]", v)),
});

/// A continuous-profiling selector (`unit:nginx.service`, ...).
fn selector(v: &Value) -> Result<String, ValueError> {
    match v {
        Value::String(s) => s
            .parse::<crate::continuous::service::Selector>()
            .map(|_| s.clone())
            .map_err(ValueError::Selector),
        _ => Err(expected(
            &format!(
                "a selector, one of {}",
                crate::continuous::service::SELECTOR_FORMS
            ),
            v,
        )),
    }
}

/// Continuous-profiling selectors.
pub const SELECTORS: Type<Vec<String>> = list(|v| match v {
    Value::Array(items) => items.iter().map(selector).collect(),
    _ => Err(expected(
        "a list of selectors such as [\"unit:nginx.service\", \"comm:postgres*\"]",
        v,
    )),
});

/// A web origin allowed to call the API with grpc-web (CORS):
/// `scheme://host` or `scheme://host:port`, as browsers send it.
fn origin(v: &Value) -> Result<String, ValueError> {
    let what = "an origin such as \"https://dash.example.com\" or \"http://localhost:8080\" (scheme, host and port only)";
    let Value::String(s) = v else {
        return Err(expected(what, v));
    };
    let host = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"));
    let ok = host.is_some_and(|h| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
    });
    if ok {
        Ok(s.clone())
    } else {
        Err(expected(what, v))
    }
}

/// Web origins.
pub const ORIGINS: Type<Vec<String>> = list(|v| match v {
    Value::Array(items) => items.iter().map(origin).collect(),
    _ => Err(expected(
        "a list of origins such as [\"https://dash.example.com\"]",
        v,
    )),
});

/// A debuginfod server's base URL: `http://` or `https://` with a host.
fn debuginfod_url(v: &Value) -> Result<String, ValueError> {
    let what = "a URL such as \"https://debuginfod.debian.net\" (http or https)";
    match v {
        Value::String(s) if crate::process::symbolize::debuginfod::is_url(s) => Ok(s.clone()),
        _ => Err(expected(what, v)),
    }
}

/// debuginfod servers' URLs.
pub const DEBUGINFOD_URLS: Type<Vec<String>> = list(|v| match v {
    Value::Array(items) => items.iter().map(debuginfod_url).collect(),
    _ => Err(expected(
        "a list of URLs such as [\"https://debuginfod.debian.net\"]",
        v,
    )),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_text_is_checked_like_file_values() {
        assert_eq!(POSITIVE.flag("4"), Ok(Value::Integer(4)));
        assert_eq!(
            POSITIVE.flag("0").unwrap_err().to_string(),
            "expected a positive integer, got 0"
        );
        assert_eq!(DAYS.flag("1.5"), Ok(Value::Float(1.5)));
        assert_eq!(BYTES.flag("2G"), Ok(Value::Integer(2 << 30)));
        assert!(RING_PAGES.flag("6").is_err());
        assert_eq!(LOG_LEVEL.flag("DEBUG"), Ok(Value::String("debug".into())));
        assert_eq!(
            LOG_LEVEL.flag("loud").unwrap_err().to_string(),
            "expected one of \"error\", \"warn\", \"info\", \"debug\", \"trace\", got \"loud\""
        );
        assert!(ORIGINS.flag("https://a.example").is_ok());
        assert_eq!(DURATION.flag("7d"), Ok(Value::String("7d".into())));
        assert_eq!(DURATION.flag("36h"), Ok(Value::String("36h".into())));
        assert_eq!(DURATION.flag("1h 30m"), Ok(Value::String("90m".into())));
        assert_eq!(DURATION.flag("2w"), Ok(Value::String("14d".into())));
        assert_eq!(DURATION.flag("3600"), Ok(Value::String("1h".into())));
        assert_eq!(DURATION.flag("61"), Ok(Value::String("61s".into())));
        for bad in ["0", "-3", "7x", "1.5s", "500ms", "36501d", ""] {
            let e = DURATION.flag(bad).unwrap_err().to_string();
            assert!(e.starts_with("expected a duration such as"), "{bad}: {e}");
        }
        assert_eq!(WINDOW.flag("3600"), Ok(Value::Integer(3600)));
        assert_eq!(
            WINDOW.flag("3601").unwrap_err().to_string(),
            "expected a number of seconds from 1 to 3600, got 3601"
        );
        assert_eq!(HISTORY_BYTES.flag("1M"), Ok(Value::String("1M".into())));
        assert_eq!(MEMORY_BYTES.flag("96M"), Ok(Value::String("96M".into())));
        assert!(MEMORY_BYTES
            .flag("16M")
            .unwrap_err()
            .to_string()
            .contains("at least 32M"));
        assert_eq!(HISTORY_BYTES.flag("2048K"), Ok(Value::String("2M".into())));
        assert_eq!(HISTORY_BYTES.flag("1048577"), Ok(Value::Integer(1048577)));
        assert!(HISTORY_BYTES
            .flag("1023K")
            .unwrap_err()
            .to_string()
            .starts_with("expected a size of at least 1M"));
        assert!(SELECTORS.flag("comm:postgres*").is_ok());
        let e = SELECTORS.flag("postgres").unwrap_err().to_string();
        assert!(
            e.starts_with("bad selector \"postgres\": expected one of"),
            "{e}"
        );
        assert!(DEBUGINFOD_URLS.flag("http://127.0.0.1:8002").is_ok());
        assert!(DEBUGINFOD_URLS
            .flag("ftp://a.example")
            .unwrap_err()
            .to_string()
            .starts_with("expected a URL such as"));
        assert!(ORIGINS
            .flag("https://a.example/")
            .unwrap_err()
            .to_string()
            .starts_with("expected an origin such as"));
    }
}
