//! In-process daemon against the real kernel over its Unix socket: attach to a
//! busy child, watch until the duration ends, check the accounting.
mod support;

use profd_common::api;
use support::{serve, sleeper, Running};

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
    let info = d
        .client
        .info(api::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
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
    let info_now = d
        .client
        .info(api::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
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
    let info = d
        .client
        .info(api::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        info.groups.is_empty(),
        "rings closed with the last session: {:?}",
        info.groups
    );
    assert_eq!(info.running_sessions, 0);
    child.kill().unwrap();
    child.wait().unwrap();
    d.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_a_busy_child_until_its_duration_ends() {
    let mut d = start("smoke").await;
    let dir = d.dir.clone();
    let mut client = d.client.clone();

    // A busy program with frame pointers: main -> spin.
    let src = dir.join("busy.c");
    let exe = dir.join("busy");
    std::fs::write(
        &src,
        "volatile unsigned long sink;\n\
         __attribute__((noinline)) void spin(void) { for (unsigned long i = 0; i < 100000; i++) sink += i; }\n\
         int main(void) { for (;;) spin(); }\n",
    )
    .unwrap();
    let cc = std::process::Command::new("cc")
        .args(["-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(cc.success());
    let mut child = std::process::Command::new(&exe).spawn().unwrap();
    let session = client
        .attach(api::AttachRequest {
            pid: child.id(),
            duration_ms: 1500,
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
        messages += 1;
        last = Some(msg);
    }
    let last = last.expect("at least one update");
    assert!(last.r#final, "the stream ends with a final update");
    let s = last.session.unwrap();
    assert_eq!(s.state, api::SessionState::DurationElapsed as i32);
    let totals = s.totals.unwrap();
    assert!(
        messages >= 3,
        "snapshot + updates every 250 ms, got {messages}"
    );
    assert!(
        totals.attributed > 300,
        "a busy child at 999 Hz for 1.5 s: {totals:?}"
    );

    let profile = client
        .get_profile(api::GetProfileRequest { session_id: s.id })
        .await
        .unwrap()
        .into_inner();
    let named = |name: &str| profile.functions.iter().find(|f| f.name == name).cloned();
    let main = named("main").unwrap_or_else(|| panic!("main in {:?}", profile.functions));
    let spin = named("spin").unwrap_or_else(|| panic!("spin in {:?}", profile.functions));
    assert!(
        main.inclusive_pct > 95.0,
        "main is on every stack: {main:?}"
    );
    assert!(spin.exclusive_pct > 90.0, "spin burns the time: {spin:?}");
    assert_eq!(spin.module, "busy");
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

    child.kill().unwrap();
    child.wait().unwrap();
    d.finish().await;
}
