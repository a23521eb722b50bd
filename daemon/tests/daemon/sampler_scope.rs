//! The sampler's choice of rings against the real kernel (needs root, fails
//! without): stack copies get rings of the target alone, shared by the
//! sessions of that target; frame pointers get the shared system-wide
//! rings; a target the kernel will not sample alone falls back to the
//! system-wide rings. Sessions get the stack tops of their rings when they
//! subscribe.
use profd::internals::perf::{online_cpus, EventKind, EventSpec};
use profd::internals::sampler::{Children, SampleSource, Sampler, StackTops, Subscriber};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Killed and reaped when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child that has exited and is not reaped yet: a zombie.
fn zombie() -> Process {
    let child = Command::new("true").spawn().expect("true runs");
    let stat = format!("/proc/{}/stat", child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") Z ")) {
        assert!(Instant::now() < deadline, "`true` did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
    Process(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_copies_get_rings_of_their_target() {
    let sampler = Sampler::new(online_cpus().expect("online CPUs"));
    let live = Process(Command::new("sleep").arg("30").spawn().expect("sleep runs"));
    let pid = live.0.id();
    let dwarf = EventSpec {
        held: false,
        mode: Default::default(),
        session: 0,
        kind: EventKind::CpuClock,
        frequency_hz: 99,
        ring_pages: 0,
        stack_bytes: 4096,
        target: None,
    };
    let fp = EventSpec {
        stack_bytes: 0,
        ..dwarf
    };
    let (tx, _rx) = mpsc::unbounded_channel();
    let subscribe = |want, session, pid| {
        let session = Subscriber::Session(session);
        sampler.subscribe(want, session, pid, Children::Ignored, tx.clone())
    };

    let first = subscribe(dwarf, 1, pid)
        .await
        .expect("per-target rings (needs root)");
    let copies = first.tops.expect("stack copies come with their tops");
    let first = first.spec;
    assert_eq!(first.target.map(|t| t.pid), Some(pid));
    let second = subscribe(dwarf, 2, pid).await.unwrap();
    let tops = second.tops.expect("stack copies come with their tops");
    let second = second.spec;
    assert_eq!(second, first, "sessions of one target share its rings");
    // A thread one session's rings saw, whose walk another session made.
    let tid = u32::MAX - 1;
    assert_eq!(copies.cut(tid, 0x1000, &[0; 4096]).len(), 4096);
    tops.learn(tid, 0x1100);
    assert_eq!(
        copies.cut(tid, 0x1000, &[0; 4096]).len(),
        0x100 + StackTops::MARGIN as usize,
        "and their stack tops"
    );
    let wide = subscribe(fp, 3, pid).await.unwrap();
    assert!(wide.tops.is_none(), "frame pointers copy no stacks");
    let wide = wide.spec;
    assert_eq!(
        wide.target, None,
        "frame pointers use the system-wide rings"
    );

    // The kernel opens no event on a process that has exited.
    let gone = zombie();
    let fallback = subscribe(dwarf, 4, gone.0.id()).await.unwrap().spec;
    assert_eq!(
        fallback.target, None,
        "a target that cannot be sampled alone falls back to the system-wide rings"
    );
    // A child's inherited event starts a period of its own: sessions that
    // follow children share the system-wide rings, whose period runs on.
    let children = sampler
        .subscribe(
            dwarf,
            Subscriber::Session(5),
            pid,
            Children::Followed,
            tx.clone(),
        )
        .await
        .unwrap()
        .spec;
    assert_eq!(children, fallback, "children are sampled system-wide");

    let mut groups = sampler.groups().await;
    groups.sort_by_key(|(spec, _)| (spec.target.is_some(), spec.stack_bytes));
    let summary: Vec<_> = groups
        .iter()
        .map(|(spec, ids)| (spec.target.map(|t| t.pid), spec.stack_bytes, ids.len()))
        .collect();
    assert_eq!(
        summary,
        [(None, 0, 1), (None, 4096, 2), (Some(pid), 4096, 2)],
        "{groups:?}"
    );
    for (spec, session) in [
        (first, 1),
        (second, 2),
        (wide, 3),
        (fallback, 4),
        (children, 5),
    ] {
        sampler
            .unsubscribe(spec, Subscriber::Session(session))
            .await;
    }
    assert!(
        sampler.groups().await.is_empty(),
        "the rings close with their last session"
    );
}
