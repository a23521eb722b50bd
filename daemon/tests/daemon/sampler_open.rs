//! The sampler's opening of a group's rings against the real kernel (needs
//! root, fails without): the events are opened in the runtime's blocking
//! pool with the groups lock let go, so while one session's rings are being
//! opened, the drains of the groups already open, the list of groups and an
//! attach to rings already open all go on.
use profd::internals::perf::{online_cpus, EventKind, EventSpec};
use profd::internals::sampler::{Children, Flush, SampleSource, Sampler, Subscriber};
use std::future::Future;
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long a call the open must not hold up may take before the test
/// fails: only how long a failure takes to show, never waited for when the
/// sampler is right.
const HELD_UP: Duration = Duration::from_secs(60);

/// Polls `fut` once: whether it finished, and with what.
async fn poll_once<F: Future>(fut: &mut Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

#[test]
fn other_sessions_go_on_while_rings_open() {
    // The blocking pool has one thread, which the test holds: an open
    // queued behind it stays in progress until the test lets it go, as a
    // slow open (a target with many threads, a host short of memory) would.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let sampler = Sampler::new(online_cpus().expect("online CPUs"));
        let (tx, _rx) = mpsc::unbounded_channel();
        let pid = std::process::id();
        let subscribe = |want, session| {
            let session = Subscriber::Session(session);
            sampler.subscribe(want, session, pid, Children::Ignored, tx.clone())
        };
        let open = EventSpec {
            held: false,
            mode: Default::default(),
            session: 0,
            kind: EventKind::CpuClock,
            frequency_hz: 99,
            ring_pages: 0,
            stack_bytes: 0,
            target: None,
        };
        let opening = EventSpec {
            frequency_hz: 97,
            ..open
        };
        let open = subscribe(open, 1)
            .await
            .expect("system-wide rings (needs root)")
            .spec;

        let (held_tx, held) = oneshot::channel();
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let holder = tokio::task::spawn_blocking(move || {
            let _ = held_tx.send(());
            let _ = gate.recv();
        });
        held.await.expect("the blocking pool's thread is held");

        // Polled once (with no cooperative budget to run out), the
        // subscription gets as far as it can: to its open, waiting for the
        // pool.
        let mut second = pin!(tokio::task::unconstrained(subscribe(opening, 2)));
        assert!(
            poll_once(&mut second).await.is_pending(),
            "session 2's rings opened while the blocking pool was held: they were opened on the runtime, not in the blocking pool"
        );

        let held_up = |what: &str| {
            format!(
                "{what} waited {HELD_UP:?} for session 2's rings to open: the groups lock is held while rings open"
            )
        };
        tokio::time::timeout(HELD_UP, sampler.flush(open, Flush::Held))
            .await
            .unwrap_or_else(|_| panic!("{}", held_up("a drain of the open group")));
        let groups = tokio::time::timeout(HELD_UP, sampler.groups())
            .await
            .unwrap_or_else(|_| panic!("{}", held_up("the list of groups")));
        let listed: Vec<_> = groups.iter().map(|(spec, _)| spec.frequency_hz).collect();
        assert_eq!(listed, [99], "only the open group is listed: {groups:?}");
        let third = tokio::time::timeout(HELD_UP, subscribe(open, 3))
            .await
            .unwrap_or_else(|_| panic!("{}", held_up("an attach to the open rings")))
            .expect("a subscription to the open rings");
        assert_eq!(third.spec, open, "session 3 shares the open rings");
        assert!(
            poll_once(&mut second).await.is_pending(),
            "session 2's rings opened while the blocking pool was held"
        );

        release.send(()).expect("the holder waits");
        holder.await.expect("the holder ends");
        let second = second
            .await
            .expect("session 2's rings open once the pool is free")
            .spec;
        assert_eq!(second.frequency_hz, 97);
        let mut groups: Vec<_> = sampler
            .groups()
            .await
            .into_iter()
            .map(|(spec, mut sessions)| {
                sessions.sort_by_key(|s| s.session());
                (spec.frequency_hz, sessions)
            })
            .collect();
        groups.sort_by_key(|(hz, _)| *hz);
        assert_eq!(
            groups,
            [
                (97, vec![Subscriber::Session(2)]),
                (99, vec![Subscriber::Session(1), Subscriber::Session(3)]),
            ]
        );
        for (spec, session) in [(open, 1), (second, 2), (open, 3)] {
            sampler
                .unsubscribe(spec, Subscriber::Session(session))
                .await;
        }
        assert!(sampler.groups().await.is_empty(), "every ring is closed");
    });
}
