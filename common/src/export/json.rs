//! profctl's JSON report of a session (the contract of docs/guide.md, "JSON"), shared by
//! the daemon's JSON export and `profctl --format json`.
use serde::Serialize;

use crate::api::{Function, ProcessSamples, Scope, Session, SessionState, Totals, Unwind};
use crate::event_name;
use crate::model::{mode_name, unit_name};

/// The state as JSON and tables spell it: `running`, `stopped`,
/// `duration_elapsed`, `exited`, `failed` (`unknown` if unset).
pub fn state_name(state: SessionState) -> &'static str {
    match state {
        SessionState::Running => "running",
        SessionState::Stopped => "stopped",
        SessionState::DurationElapsed => "duration_elapsed",
        SessionState::Exited => "exited",
        SessionState::Failed => "failed",
        SessionState::Unspecified => "unknown",
    }
}

/// The unwinding as JSON and tables spell it: `auto`, `fp` or `dwarf`
/// (`auto` when unset).
pub fn unwind_name(unwind: Unwind) -> &'static str {
    match unwind {
        Unwind::Auto | Unwind::Unspecified => "auto",
        Unwind::Fp => "fp",
        Unwind::Dwarf => "dwarf",
    }
}

/// The scope as JSON spells it: `system-wide` or `target` (`unknown` when
/// unset, as for a profile read from a file).
pub fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::SystemWide => "system-wide",
        Scope::Target => "target",
        Scope::Unspecified => "unknown",
    }
}

#[derive(Serialize)]
struct Report<'a> {
    session_id: u64,
    pid: u32,
    comm: &'a str,
    state: &'static str,
    /// Only for a failed session.
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
    duration_s: f64,
    frequency_hz: u32,
    event: &'static str,
    unwind: &'static str,
    stack_bytes: u32,
    owner: &'a str,
    owner_uid: u32,
    children: bool,
    processes: &'a [ProcessSamples],
    scope: &'static str,
    mode: &'static str,
    unit: &'static str,
    totals: Totals,
    functions: Vec<Row<'a>>,
}

#[derive(Serialize)]
struct Row<'a> {
    id: u64,
    name: &'a str,
    module: &'a str,
    inclusive: u64,
    exclusive: u64,
    inclusive_pct: f64,
    exclusive_pct: f64,
    inlined: bool,
}

/// The JSON report: `session_id`, `pid`, `comm`, `state`, (`error` when
/// not empty), `duration_s`, `frequency_hz`, `event`, `unwind`,
/// `stack_bytes`, `owner`, `owner_uid`, `children`, `processes` [{`pid`,
/// `ppid`, `comm`, `samples`, `exited`}], `scope`, `mode` (`cpu`,
/// `off-cpu` or `wall`), `unit` (of the counts: `samples`, or
/// `nanoseconds` for off-cpu and wall), `totals` {`attributed`,
/// `discarded`, `lost`, `truncated`, `unsymbolized`, `overflowed`,
/// `throttled`, `unchecked`, `unsampled`, `time` (null in cpu mode, else
/// {`on_cpu_ns`, `off_cpu_ns`, `runnable_ns`, `waits`, `unpaired`,
/// `open_at_end`}), `python_unreadable`, `ruby_unreadable`, `perl_unreadable`,
/// `truncated_copy_ended`} and `functions` [{`id`, `name`, `module`, `inclusive`,
/// `exclusive`, `inclusive_pct`, `exclusive_pct`, `inlined`}], keys in this
/// order. With the unit `nanoseconds`, `processes[].samples`,
/// `attributed`, `unsymbolized`, `overflowed`, `unchecked` and the
/// functions' counts are nanoseconds. `functions` are taken as given (order, percentages): pass them
/// sorted and limited as wanted.
pub fn json(session: &Session, functions: &[Function]) -> serde_json::Value {
    let report = Report {
        session_id: session.id,
        pid: session.pid,
        comm: &session.comm,
        state: state_name(session.state()),
        error: &session.error,
        duration_s: session.duration_s,
        frequency_hz: session.frequency_hz,
        event: event_name(session.event()),
        unwind: unwind_name(session.unwind()),
        stack_bytes: session.stack_bytes,
        owner: &session.owner,
        owner_uid: session.owner_uid,
        children: session.children,
        processes: &session.processes,
        scope: scope_name(session.scope()),
        mode: mode_name(session.mode()),
        unit: unit_name(session.mode()),
        totals: session.totals.unwrap_or_default(),
        functions: functions
            .iter()
            .map(|f| Row {
                id: f.id,
                name: &f.name,
                module: &f.module,
                inclusive: f.inclusive,
                exclusive: f.exclusive,
                inclusive_pct: f.inclusive_pct,
                exclusive_pct: f.exclusive_pct,
                inlined: f.inlined,
            })
            .collect(),
    };
    serde_json::to_value(report).expect("the JSON report holds only plain values")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Event;
    use crate::testdata::known;
    use crate::views;

    fn session() -> Session {
        let mut s = Session {
            id: 7,
            pid: 1234,
            comm: "prog".into(),
            frequency_hz: 999,
            duration_s: 2.5,
            stack_bytes: 16384,
            totals: Some(Totals {
                attributed: 12,
                discarded: 3,
                lost: 1,
                truncated: 2,
                unsymbolized: 0,
                overflowed: 0,
                throttled: 0,
                unchecked: 0,
                unsampled: 4,
                time: None,
                python_unreadable: 1,
                ruby_unreadable: 0,
                perl_unreadable: 0,
                truncated_copy_ended: 1,
            }),
            processes: vec![ProcessSamples {
                pid: 1234,
                ppid: 0,
                comm: "prog".into(),
                samples: 12,
                exited: true,
            }],
            ..Default::default()
        };
        s.set_state(SessionState::DurationElapsed);
        s.set_event(Event::CpuClock);
        s.set_unwind(Unwind::Dwarf);
        s.set_scope(Scope::Target);
        s
    }

    fn keys(v: &serde_json::Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    #[test]
    fn keys_are_the_contract_in_order() {
        let v = json(&session(), &views::functions(&known()));
        assert_eq!(
            keys(&v),
            [
                "session_id",
                "pid",
                "comm",
                "state",
                "duration_s",
                "frequency_hz",
                "event",
                "unwind",
                "stack_bytes",
                "owner",
                "owner_uid",
                "children",
                "processes",
                "scope",
                "mode",
                "unit",
                "totals",
                "functions"
            ]
        );
        assert_eq!(
            keys(&v["totals"]),
            [
                "attributed",
                "discarded",
                "lost",
                "truncated",
                "unsymbolized",
                "overflowed",
                "throttled",
                "unchecked",
                "unsampled",
                "time",
                "python_unreadable",
                "ruby_unreadable",
                "perl_unreadable",
                "truncated_copy_ended"
            ]
        );
        assert_eq!((&v["mode"], &v["unit"]), (&"cpu".into(), &"samples".into()));
        assert!(v["totals"]["time"].is_null());
        assert_eq!(
            keys(&v["processes"][0]),
            ["pid", "ppid", "comm", "samples", "exited"]
        );
        assert_eq!(v["processes"][0]["samples"], 12);
        let f = &v["functions"];
        assert_eq!(f.as_array().unwrap().len(), 6);
        assert_eq!(
            keys(&f[0]),
            [
                "id",
                "name",
                "module",
                "inclusive",
                "exclusive",
                "inclusive_pct",
                "exclusive_pct",
                "inlined"
            ]
        );
        assert_eq!(f[0]["name"], "main");
        assert_eq!(f[0]["inclusive_pct"], 100.0);
        assert_eq!(f[5]["inlined"], true);
        assert_eq!(v["state"], "duration_elapsed");
        assert_eq!(v["event"], "cpu-clock");
        assert_eq!(v["unwind"], "dwarf");
        assert_eq!(v["totals"]["lost"], 1);
        assert_eq!(v["scope"], "target");
        assert_eq!(v["totals"]["unsampled"], 4);
    }

    #[test]
    fn off_cpu_reports_say_nanoseconds_and_time_totals() {
        let mut s = session();
        s.set_mode(crate::api::Mode::OffCpu);
        let time = crate::api::TimeTotals {
            on_cpu_ns: 1_000,
            off_cpu_ns: 12_000_000,
            runnable_ns: 2_000_000,
            waits: 30,
            unpaired: 2,
            open_at_end: 1,
            unknown_ns: 5_000,
        };
        s.totals.as_mut().unwrap().time = Some(time);
        s.totals.as_mut().unwrap().attributed = 12_000_000;
        let v = json(&s, &views::functions(&crate::testdata::off_cpu()));
        assert_eq!(
            (&v["mode"], &v["unit"]),
            (&"off-cpu".into(), &"nanoseconds".into())
        );
        assert_eq!(
            keys(&v["totals"]["time"]),
            [
                "on_cpu_ns",
                "off_cpu_ns",
                "runnable_ns",
                "waits",
                "unpaired",
                "open_at_end",
                "unknown_ns"
            ]
        );
        assert_eq!(v["totals"]["time"]["off_cpu_ns"], 12_000_000);
        assert_eq!(v["totals"]["time"]["open_at_end"], 1);
        assert_eq!(v["totals"]["time"]["unknown_ns"], 5_000);
        let top = &v["functions"][0];
        assert_eq!(top["name"], "[off-cpu: blocked]");
        assert_eq!(
            (&top["inclusive"], &top["inclusive_pct"]),
            (&12_000_000.into(), &100.0.into())
        );
        let mut wall = s.clone();
        wall.set_mode(crate::api::Mode::Wall);
        assert_eq!(json(&wall, &[])["mode"], "wall");
    }

    #[test]
    fn error_only_when_failed() {
        let mut s = session();
        s.set_state(SessionState::Failed);
        s.error = "perf_event_open: EACCES".into();
        let v = json(&s, &[]);
        assert_eq!(v["state"], "failed");
        assert_eq!(v["error"], "perf_event_open: EACCES");
        assert_eq!(keys(&v)[4], "error");
        assert!(v["functions"].as_array().unwrap().is_empty());
        let v = json(&Session::default(), &[]);
        assert_eq!(
            (&v["state"], &v["unwind"], &v["scope"]),
            (&"unknown".into(), &"auto".into(), &"unknown".into())
        );
        assert_eq!(v["totals"]["attributed"], 0);
    }
}
