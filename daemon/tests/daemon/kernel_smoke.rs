//! In-process daemon against the real kernel over its Unix socket: attach to a
//! busy child, watch until the duration ends, check the accounting.

use crate::support::{serve, sleeper, spawn, Running};
use profd_common::api;

/// Build `main -> spin` (spin: a loop with no stack frame of its own at -O2).
fn busy_program(dir: &std::path::Path, cflags: &[&str]) -> std::path::PathBuf {
    let src = dir.join("busy.c");
    let exe = dir.join(format!("busy{}", cflags.join("").replace(['-', '='], "")));
    std::fs::write(
        &src,
        "volatile unsigned long sink;\n\
         __attribute__((noinline)) void spin(void) { for (unsigned long i = 0; i < 100000; i++) sink += i; }\n\
         int main(void) { for (;;) { spin(); sink++; } }\n",
    )
    .unwrap();
    let cc = std::process::Command::new("cc")
        .args(cflags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(cc.success());
    exe
}

/// Profile `exe` for `ms` with `unwind`; the final profile.
async fn profile_for(
    d: &mut Running,
    exe: &std::path::Path,
    ms: u64,
    unwind: api::Unwind,
) -> (api::GetProfileResponse, f64) {
    let mut child = spawn(std::process::Command::new(exe));
    // From before the attach: every sample falls in this CPU time.
    let cpu_before = cpu_seconds(child.id());
    let req = api::AttachRequest {
        pid: child.id(),
        duration_ms: ms,
        unwind: unwind as i32,
        ..Default::default()
    };
    let s = d
        .client
        .attach(req)
        .await
        .expect("attach (needs root)")
        .into_inner()
        .session
        .unwrap();
    let mut stream = d.watch(s.id, 0).await;
    while stream.message().await.unwrap().is_some() {}
    let cpu_s = cpu_seconds(child.id()) - cpu_before;
    let profile = d.profile(s.id).await;
    child.kill();
    (profile, cpu_s)
}

/// Seconds `pid` has run on a CPU (/proc/PID/schedstat, first field in ns).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    stat.split_whitespace()
        .next()
        .unwrap()
        .parse::<f64>()
        .unwrap()
        / 1e9
}

fn pct(p: &api::GetProfileResponse, name: &str) -> (f64, f64) {
    p.functions
        .iter()
        .find(|f| f.name == name)
        .map(|f| (f.inclusive_pct, f.exclusive_pct))
        .unwrap_or_else(|| panic!("{name} in {:?}", p.functions))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dwarf_unwinding_keeps_callers_of_frameless_code() {
    let mut d = start("dwarf").await;
    let dir = d.dir.clone();
    let exe = busy_program(&dir, &["-O2", "-g", "-fomit-frame-pointer"]);

    let (auto, cpu_s) = profile_for(&mut d, &exe, 1500, api::Unwind::Unspecified).await;
    let session = auto.session.clone().unwrap();
    assert_eq!(
        session.unwind,
        api::Unwind::Dwarf as i32,
        "auto copies stacks on this kernel"
    );
    assert_eq!(session.stack_bytes, 16384);
    let totals = session.totals.unwrap();
    // As many samples as the CPU time the kernel gave the child calls for
    // (it runs only as much as the machine lets it).
    assert!(
        totals.attributed as f64 >= 0.6 * cpu_s * 999.0,
        "{cpu_s:.2} s on CPU at 999 Hz: {totals:?}"
    );
    let (main_incl, _) = pct(&auto, "main");
    let (_, spin_excl) = pct(&auto, "spin");
    assert!(
        main_incl >= 99.0,
        "main on every stack: {main_incl} in {:?}",
        auto.functions
    );
    assert!(spin_excl >= 90.0, "{spin_excl}");
    assert!(
        totals.truncated * 100 <= totals.attributed,
        "at most 1 % truncated: {totals:?}"
    );

    let (fp, _) = profile_for(&mut d, &exe, 1000, api::Unwind::Fp).await;
    assert_eq!(fp.session.as_ref().unwrap().unwind, api::Unwind::Fp as i32);
    let main_fp = fp
        .functions
        .iter()
        .find(|f| f.name == "main")
        .map_or(0.0, |f| f.inclusive_pct);
    assert!(
        main_fp < 50.0,
        "a frame-pointer walk loses the caller of a frameless leaf: {main_fp}"
    );
    d.finish().await;
}

async fn start(name: &str) -> Running {
    serve(name, |socket| {
        profd::Daemon::bind(profd::Config::new(socket))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rings_are_shared_per_setting_and_closed_with_the_last_session() {
    let mut d = start("rings").await;
    let mut child = sleeper();
    let pid = child.id();
    let info = d.info().await;
    assert!(
        info.groups.is_empty(),
        "no rings before any session: {:?}",
        info.groups
    );
    let attach = |freq: u32, event: api::Event| api::AttachRequest {
        pid,
        frequency_hz: Some(freq),
        event: event as i32,
        ..Default::default()
    };
    let mut ids = Vec::new();
    let mut events = Vec::new();
    for (freq, event) in [
        (999, api::Event::CpuClock),
        (999, api::Event::Unspecified),
        (499, api::Event::CpuClock),
        (499, api::Event::Cycles),
    ] {
        let s = d
            .client
            .attach(attach(freq, event))
            .await
            .expect("attach (needs root)");
        let s = s.into_inner().session.unwrap();
        ids.push(s.id);
        events.push(s.event);
    }
    let expected_event = if info.pmu_available {
        api::Event::Cycles
    } else {
        api::Event::CpuClock
    };
    assert_eq!(
        events[3], expected_event as i32,
        "cycles falls back without a PMU"
    );
    let info_now = d.info().await;
    let mut groups: Vec<_> = info_now
        .groups
        .iter()
        .map(|g| (g.frequency_hz, g.event, g.sessions))
        .collect();
    groups.sort();
    let mut want = vec![(999, api::Event::CpuClock as i32, 2)];
    if info.pmu_available {
        want.extend([
            (499, api::Event::CpuClock as i32, 1),
            (499, api::Event::Cycles as i32, 1),
        ]);
    } else {
        want.push((499, api::Event::CpuClock as i32, 2));
    }
    want.sort();
    assert_eq!(groups, want, "one ring group per distinct setting");
    assert_eq!(info_now.running_sessions, 4);
    for id in ids {
        d.client
            .stop(api::StopRequest { session_id: id })
            .await
            .unwrap();
    }
    let info = d.info().await;
    assert!(
        info.groups.is_empty(),
        "rings closed with the last session: {:?}",
        info.groups
    );
    assert_eq!(info.running_sessions, 0);
    child.kill();
    d.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_a_busy_child_until_its_duration_ends() {
    let mut d = start("smoke").await;
    let dir = d.dir.clone();
    let mut client = d.client.clone();

    let exe = busy_program(&dir, &["-O0", "-fno-omit-frame-pointer"]);
    let mut child = spawn(std::process::Command::new(&exe));
    let cpu_before = cpu_seconds(child.id());
    let session = client
        .attach(api::AttachRequest {
            pid: child.id(),
            duration_ms: 1500,
            unwind: api::Unwind::Fp as i32,
            ..Default::default()
        })
        .await
        .expect("attach (perf_event_open must work: run as root)")
        .into_inner()
        .session
        .unwrap();
    let mut stream = d.watch(session.id, 250).await;
    let mut last = None;
    let mut messages = 0;
    while let Some(msg) = stream.message().await.unwrap() {
        assert_eq!(msg.snapshot, messages == 0);
        if let Some(before) = &last {
            let before: &api::WatchResponse = before;
            assert!(
                msg.seq >= before.seq,
                "seq went back: {} then {}",
                before.seq,
                msg.seq
            );
            assert!(!before.r#final, "an update after the final one");
        }
        messages += 1;
        last = Some(msg);
    }
    let cpu_s = cpu_seconds(child.id()) - cpu_before;
    let last = last.expect("at least one update");
    assert!(last.r#final, "the stream ends with a final update");
    let s = last.session.unwrap();
    assert_eq!(s.state, api::SessionState::DurationElapsed as i32);
    let totals = s.totals.unwrap();
    assert!(
        messages >= 2,
        "a snapshot and a final update, got {messages}"
    );
    // The child runs only as much as the (possibly busy) machine lets it:
    // compare with the CPU time the kernel gave it while watched.
    let expected = cpu_s * 999.0;
    assert!(
        (0.6 * expected..=1.1 * expected + 10.0).contains(&(totals.attributed as f64)),
        "{cpu_s:.2} s on CPU at 999 Hz: {totals:?}"
    );

    let profile = d.profile(s.id).await;
    let named = |name: &str| profile.functions.iter().find(|f| f.name == name).cloned();
    let main = named("main").unwrap_or_else(|| panic!("main in {:?}", profile.functions));
    let spin = named("spin").unwrap_or_else(|| panic!("spin in {:?}", profile.functions));
    assert!(
        main.inclusive_pct > 95.0,
        "main is on every stack: {main:?}"
    );
    assert!(spin.exclusive_pct > 90.0, "spin burns the time: {spin:?}");
    assert_eq!(spin.module, exe.file_name().unwrap().to_str().unwrap());
    for f in &profile.functions {
        assert!(
            f.inclusive <= totals.attributed && f.exclusive <= f.inclusive,
            "{f:?}"
        );
        eprintln!(
            "{:6.2}% {:6.2}% {} [{}]",
            f.inclusive_pct, f.exclusive_pct, f.name, f.module
        );
    }
    let excl: u64 = profile.functions.iter().map(|f| f.exclusive).sum();
    assert_eq!(
        excl, totals.attributed,
        "every sample has exactly one innermost frame"
    );

    child.kill();
    d.finish().await;
}
