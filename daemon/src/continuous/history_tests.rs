use super::*;
use crate::continuous::encode;
use profd_common::model::ResolvedProfile;
use profd_common::views;
use std::time::Duration;

impl History {
    /// Add a window built whole, encoded as the profiler's are.
    async fn add_window(&self, w: api::Window) {
        self.add(encode::encode(w).unwrap()).await
    }

    /// The query's session and profile with its stacks.
    async fn query_stacks(
        &self,
        q: &api::Query,
    ) -> Result<(api::Session, profd_common::model::ResolvedProfile), Error> {
        let m = self.query(q, Want::Stacks).await?;
        Ok((m.session, m.profile))
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("profd-history-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn settings() -> Settings {
    Settings {
        retention_bytes: 1 << 30,
        retention_age: Duration::from_secs(3600),
        ..Settings::default()
    }
}

const SEC: u64 = 1_000_000_000;

/// Builds hand-made windows: services with processes, threads, functions
/// and stacks (frames by function name, innermost first).
struct WindowBuilder {
    w: api::Window,
}

impl WindowBuilder {
    /// A 10 s window starting `ago_s` seconds before now.
    fn new(id: &str, ago_s: u64) -> WindowBuilder {
        let start = now_ns() - ago_s * SEC;
        WindowBuilder {
            w: api::Window {
                id: id.into(),
                start_unix_ns: start,
                end_unix_ns: start + 10 * SEC,
                host: "web-1".into(),
                frequency_hz: 19,
                totals: Some(api::Totals {
                    lost: 1,
                    discarded: 5,
                    ..Default::default()
                }),
                ..Default::default()
            },
        }
    }

    /// Add `count` samples of `stack` (innermost first) on thread `tid` of
    /// process `pid` (`comm`) of `service`.
    fn stack(
        mut self,
        service: &str,
        pid: u32,
        comm: &str,
        tid: u32,
        stack: &[&str],
        count: u64,
    ) -> Self {
        let at = match self.w.services.iter().position(|s| s.service == service) {
            Some(at) => at,
            None => {
                self.w.services.push(api::ServiceWindow {
                    service: service.into(),
                    ..Default::default()
                });
                self.w.services.len() - 1
            }
        };
        let sw = &mut self.w.services[at];
        sw.samples += count;
        match sw.processes.iter_mut().find(|p| p.pid == pid) {
            Some(p) => p.samples += count,
            None => sw.processes.push(api::WindowProcess {
                pid,
                comm: comm.into(),
                samples: count,
                ..Default::default()
            }),
        }
        match sw.threads.iter_mut().find(|t| t.tid == tid) {
            Some(t) => t.samples += count,
            None => sw.threads.push(api::WindowThread {
                tid,
                pid,
                name: format!("{comm}-{tid}"),
                samples: count,
            }),
        }
        let mut function = Vec::new();
        for name in stack {
            let i = match sw.functions.iter().position(|f| f.name == *name) {
                Some(i) => i,
                None => {
                    sw.functions.push(api::WindowFunction {
                        name: name.to_string(),
                        module: "app.bin".into(),
                        ..Default::default()
                    });
                    sw.functions.len() - 1
                }
            };
            function.push(i as u32);
        }
        sw.stacks.push(api::WindowStack {
            tid,
            line: vec![0; function.len()],
            address: (0..function.len() as u64).map(|a| 0x1000 + a).collect(),
            function,
            count,
        });
        if let Some(t) = &mut self.w.totals {
            t.attributed += count;
        }
        self
    }

    fn build(self) -> api::Window {
        self.w
    }
}

/// A window of a few hundred bytes once compressed (random names do not
/// compress), so that byte limits can be tested.
fn bulky(id: &str, ago_s: u64) -> api::Window {
    let names: Vec<String> = (0..40).map(|_| random_id()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    WindowBuilder::new(id, ago_s)
        .stack("app", 10, "app", 10, &names, 1)
        .build()
}

fn ids(h: &History) -> Vec<String> {
    h.inner
        .lock()
        .windows
        .keys()
        .map(|(_, id)| id.clone())
        .collect()
}

fn query(services: &[&str], by: api::GroupBy) -> api::Query {
    api::Query {
        services: services.iter().map(|s| s.to_string()).collect(),
        by: by as i32,
        ..Default::default()
    }
}

/// The function table of a profile by name: (inclusive, exclusive).
fn table(p: &ResolvedProfile) -> HashMap<String, (u64, u64)> {
    views::functions(p)
        .into_iter()
        .map(|f| (f.name, (f.inclusive, f.exclusive)))
        .collect()
}

#[tokio::test]
async fn windows_survive_a_restart() {
    let dir = scratch("restart");
    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    h.add_window(
        WindowBuilder::new("aa01", 30)
            .stack("nginx.service", 1, "nginx", 1, &["work", "main"], 3)
            .build(),
    )
    .await;
    let second = WindowBuilder::new("aa02", 20)
        .stack("db", 2, "pg", 2, &["scan", "main"], 4)
        .build();
    h.add_window(second.clone()).await;
    // Added twice: kept once.
    h.add_window(second).await;
    let before = h.stats();
    assert_eq!(before.windows, 2);
    assert!(before.bytes > 0);
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(
        files.len(),
        2,
        "one file per window, no leftovers: {files:?}"
    );
    drop(h);

    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    assert_eq!(h.stats(), before, "the index is rebuilt from the names");
    let list = h.list(0, 0).await.unwrap();
    assert!(list.enabled);
    assert_eq!(list.host, host_name());
    assert_eq!(list.windows.len(), 2);
    assert_eq!(list.windows[0].id, "aa01", "oldest first");
    assert_eq!(list.windows[1].services[0].service, "db");
    let services: Vec<(&str, u64)> = list
        .services
        .iter()
        .map(|s| (s.service.as_str(), s.samples))
        .collect();
    assert_eq!(services, [("db", 4), ("nginx.service", 3)]);
    let (session, p) = h.query_stacks(&api::Query::default()).await.unwrap();
    assert_eq!(p.attributed, 7);
    assert_eq!(session.totals.unwrap().lost, 2, "summed over the windows");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_listing_selects_windows_by_time() {
    let h = History::open(None, &settings()).unwrap();
    for (id, ago) in [("a", 100), ("b", 50), ("c", 20)] {
        h.add_window(
            WindowBuilder::new(id, ago)
                .stack("s", 1, "x", 1, &["f"], 1)
                .build(),
        )
        .await;
    }
    let c_start = h.list(0, 0).await.unwrap().windows[2].start_unix_ns / 1_000_000;
    let b_end = h.list(0, 0).await.unwrap().windows[1].end_unix_ns / 1_000_000;
    let ids = |l: api::ListWindowsResponse| -> Vec<String> {
        l.windows.into_iter().map(|w| w.id).collect()
    };
    assert_eq!(ids(h.list(c_start, 0).await.unwrap()), ["c"]);
    assert_eq!(ids(h.list(0, c_start).await.unwrap()), ["a", "b"]);
    assert_eq!(
        ids(h.list(b_end - 1, c_start + 1).await.unwrap()),
        ["b", "c"]
    );
    let err = h.list(c_start, b_end).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("from_unix_ms"), "{err}");
}

#[tokio::test]
async fn retention_by_bytes_drops_the_oldest_and_counts() {
    let dir = scratch("bytes");
    let one = encode::encode(bulky("x", 0)).unwrap().gz.len() as u64;
    let s = Settings {
        retention_bytes: one * 3 + one / 2,
        ..settings()
    };
    let h = History::open(Some(dir.clone()), &s).unwrap();
    for (i, id) in ["w1", "w2", "w3", "w4", "w5"].iter().enumerate() {
        h.add_window(bulky(id, 100 - i as u64 * 10)).await;
    }
    let st = h.stats();
    assert_eq!(ids(&h), ["w3", "w4", "w5"]);
    assert_eq!((st.windows, st.dropped_bytes, st.dropped_age), (3, 2, 0));
    assert!(st.bytes <= s.retention_bytes);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        3,
        "their files are gone"
    );
    // The same limit in memory.
    let h = History::open(None, &s).unwrap();
    for (i, id) in ["w1", "w2", "w3", "w4", "w5"].iter().enumerate() {
        h.add_window(bulky(id, 100 - i as u64 * 10)).await;
    }
    assert_eq!(ids(&h), ["w3", "w4", "w5"]);
    assert_eq!(h.stats().dropped_bytes, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn retention_by_age_drops_the_oldest_at_add_and_at_open() {
    let dir = scratch("age");
    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    // Ended 2 h ago, past the hour kept: dropped at once.
    h.add_window(bulky("old", 7200)).await;
    assert_eq!(h.stats().dropped_age, 1);
    for (id, ago) in [("m40", 2400), ("m20", 1200), ("m1", 60)] {
        h.add_window(bulky(id, ago)).await;
    }
    assert_eq!(ids(&h), ["m40", "m20", "m1"]);
    drop(h);
    // Reopened keeping 25 minutes: the window of 40 minutes ago goes.
    let s = Settings {
        retention_age: Duration::from_secs(1500),
        ..settings()
    };
    let h = History::open(Some(dir.clone()), &s).unwrap();
    assert_eq!(ids(&h), ["m20", "m1"]);
    let st = h.stats();
    assert_eq!((st.dropped_age, st.dropped_bytes, st.windows), (1, 0, 2));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn damaged_files_are_moved_aside_and_counted() {
    let dir = scratch("damaged");
    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    h.add_window(
        WindowBuilder::new("good", 60)
            .stack("s", 1, "x", 1, &["f"], 2)
            .build(),
    )
    .await;
    drop(h);
    // A truncated window, a file that is not gzip, a leftover of an
    // interrupted write, and a file that is not a window at all.
    let start = now_ns() - 30 * SEC;
    let bytes = encode::encode(
        WindowBuilder::new("cut", 30)
            .stack("s", 1, "x", 1, &["f"], 2)
            .build(),
    )
    .unwrap()
    .gz;
    let cut = file_name(start, start + 10 * SEC, "cut");
    std::fs::write(dir.join(&cut), &bytes[..bytes.len() / 2]).unwrap();
    let junk = file_name(start + 1, start + 10 * SEC, "junk");
    std::fs::write(dir.join(&junk), b"not gzip").unwrap();
    std::fs::write(dir.join("x.window.gz.tmp"), b"half").unwrap();
    std::fs::write(dir.join("README"), b"hello").unwrap();

    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    assert_eq!(h.stats().windows, 3, "indexed by name, not read");
    assert!(!dir.join("x.window.gz.tmp").exists(), "leftover removed");
    let (_, p) = h.query_stacks(&api::Query::default()).await.unwrap();
    assert_eq!(p.attributed, 2, "the good window is read");
    let st = h.stats();
    assert_eq!((st.windows, st.damaged), (1, 2));
    assert!(dir.join(format!("{cut}.damaged")).exists());
    assert!(dir.join(format!("{junk}.damaged")).exists());
    assert!(dir.join("README").exists(), "other files are left alone");
    let list = h.list(0, 0).await.unwrap();
    assert_eq!((list.windows.len(), list.damaged), (1, 2));
    drop(h);
    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    assert_eq!(h.stats().windows, 1, "damaged files are not indexed again");
    assert!(
        dir.join(format!("{cut}.damaged")).exists(),
        "kept within the age"
    );
    drop(h);
    // Past the age kept, damaged files go with the windows.
    let s = Settings {
        retention_age: Duration::from_secs(5),
        ..settings()
    };
    let h = History::open(Some(dir.clone()), &s).unwrap();
    assert_eq!(h.stats().windows, 0);
    assert!(!dir.join(format!("{cut}.damaged")).exists());
    assert!(dir.join("README").exists());
    drop(h);
    // A damaged file whose name no age reaches (dated 2100, or no window
    // name at all) goes once it has been aside longer than the age kept.
    let future = file_name(4_102_444_800 * SEC, 4_102_444_810 * SEC, "future");
    for name in [format!("{future}.damaged"), "junk.damaged".to_string()] {
        std::fs::write(dir.join(&name), b"aside").unwrap();
    }
    let s = Settings {
        retention_age: Duration::from_secs(1),
        ..settings()
    };
    drop(History::open(Some(dir.clone()), &s).unwrap());
    assert!(
        dir.join("junk.damaged").exists(),
        "aside for less than the age"
    );
    std::thread::sleep(Duration::from_millis(1100));
    drop(History::open(Some(dir.clone()), &s).unwrap());
    assert!(!dir.join(format!("{future}.damaged")).exists());
    assert!(!dir.join("junk.damaged").exists());
    assert!(dir.join("README").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn queries_merge_windows_and_filter_services_and_processes() {
    let h = History::open(None, &settings()).unwrap();
    h.add_window(
        WindowBuilder::new("w1", 40)
            .stack("web", 10, "nginx", 10, &["read", "serve", "main"], 3)
            .stack("web", 11, "nginx", 11, &["serve", "main"], 1)
            .stack("db", 20, "pg", 20, &["scan", "main"], 5)
            .build(),
    )
    .await;
    h.add_window(
        WindowBuilder::new("w2", 20)
            .stack("web", 10, "nginx", 10, &["read", "serve", "main"], 2)
            .stack("db", 20, "pg", 21, &["scan", "main"], 1)
            .build(),
    )
    .await;

    let (session, p) = h.query_stacks(&api::Query::default()).await.unwrap();
    assert_eq!(p.attributed, 12);
    assert_eq!(
        (p.pid, p.comm.as_str(), p.frequency_hz),
        (0, "continuous", 19)
    );
    assert_eq!(p.duration_s, 20.0, "two windows of 10 s");
    let t = table(&p);
    assert_eq!(t["main"], (12, 0), "one `main` across services");
    assert_eq!(t["read"], (5, 5));
    assert_eq!(
        p.stacks.len(),
        4,
        "same (thread, frames) merged across windows: {:?}",
        p.stacks
    );
    assert_eq!(p.threads[&21], "pg-21");
    assert_eq!(session.id, 0);
    assert_eq!(session.scope, api::Scope::SystemWide as i32);
    assert_eq!(session.state, api::SessionState::DurationElapsed as i32);
    assert_eq!(session.duration_s, 20.0);
    let totals = session.totals.unwrap();
    assert_eq!(
        (totals.attributed, totals.lost, totals.discarded),
        (12, 2, 10)
    );
    assert_eq!(
        session.started_unix_ms,
        h.list(0, 0).await.unwrap().windows[0].start_unix_ns / 1_000_000
    );

    let (session, p) = h
        .query_stacks(&query(&["web"], api::GroupBy::Unspecified))
        .await
        .unwrap();
    assert_eq!(p.attributed, 6);
    assert!(!table(&p).contains_key("scan"));
    assert_eq!(session.totals.unwrap().attributed, 6);
    let procs: Vec<(u32, &str, u64)> = session
        .processes
        .iter()
        .map(|p| (p.pid, p.comm.as_str(), p.samples))
        .collect();
    assert_eq!(procs, [(10, "nginx", 5), (11, "nginx", 1)]);

    let q = api::Query {
        pids: vec![20],
        ..Default::default()
    };
    let (_, p) = h.query_stacks(&q).await.unwrap();
    assert_eq!(p.attributed, 6);
    assert_eq!(table(&p)["scan"], (6, 6));

    let (_, p) = h
        .query_stacks(&query(&[], api::GroupBy::Service))
        .await
        .unwrap();
    let t = table(&p);
    assert_eq!(t["[service web]"], (6, 0));
    assert_eq!(t["[service db]"], (6, 0));
    for s in &p.stacks {
        let outer = &p.functions[s.frames.last().unwrap().function as usize];
        assert_eq!(outer.module, "[group]", "outermost frame names the group");
    }
    let (_, p) = h
        .query_stacks(&query(&["db"], api::GroupBy::Process))
        .await
        .unwrap();
    assert_eq!(table(&p)["[process 20 pg]"], (6, 0));
    let (_, p) = h
        .query_stacks(&query(&[], api::GroupBy::Host))
        .await
        .unwrap();
    assert_eq!(table(&p)["[host web-1]"], (12, 0));
}

#[tokio::test]
async fn bad_queries_say_what_to_change() {
    let h = History::open(None, &settings()).unwrap();
    h.add_window(
        WindowBuilder::new("w1", 40)
            .stack("web", 10, "nginx", 10, &["f"], 1)
            .stack("db", 2, "pg", 2, &["g"], 1)
            .build(),
    )
    .await;
    let err = h
        .query_stacks(&query(&["nope"], api::GroupBy::Unspecified))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("\"nope\"") && msg.contains("\"db\", \"web\""),
        "{msg}"
    );
    let q = api::Query {
        pids: vec![99],
        ..Default::default()
    };
    let err = h.query_stacks(&q).await.unwrap_err();
    assert!(
        matches!(err, Error::NotFound(_)) && err.to_string().contains("99"),
        "{err}"
    );
    let q = api::Query {
        from_unix_ms: 20,
        to_unix_ms: 10,
        ..Default::default()
    };
    let err = h.query_stacks(&q).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("query.from_unix_ms 20"), "{err}");
    let q = api::Query {
        by: 9,
        ..Default::default()
    };
    let err = h.query_stacks(&q).await.unwrap_err();
    assert!(err.to_string().contains("query.by 9"), "{err}");
    // A range with no windows: not an empty profile, but what is there.
    let q = api::Query {
        from_unix_ms: 1_000,
        to_unix_ms: 2_000,
        ..Default::default()
    };
    let err = h.query_stacks(&q).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("no windows in the history from 1970-01-01T00:00:01Z to 1970-01-01T00:00:02Z")
            && msg.contains("it holds 1 from "),
        "{msg}"
    );
    let empty = History::open(None, &settings()).unwrap();
    let err = empty
        .query_stacks(&api::Query::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NotFound(_)) && err.to_string().contains("it holds none"),
        "{err}"
    );
}

#[tokio::test]
async fn recursion_counts_once_per_sample() {
    let h = History::open(None, &settings()).unwrap();
    h.add_window(
        WindowBuilder::new("w1", 40)
            .stack("app", 1, "app", 1, &["fib", "fib", "fib", "main"], 4)
            .build(),
    )
    .await;
    h.add_window(
        WindowBuilder::new("w2", 20)
            .stack("app", 1, "app", 1, &["fib", "fib", "main"], 2)
            .build(),
    )
    .await;
    let (_, p) = h
        .query_stacks(&query(&[], api::GroupBy::Service))
        .await
        .unwrap();
    let t = table(&p);
    assert_eq!(t["fib"], (6, 6), "inclusive once per sample, not per frame");
    assert_eq!(t["main"], (6, 0));
    assert_eq!(t["[service app]"], (6, 0));
    let rows = views::functions(&p);
    assert_eq!(
        rows.iter().find(|f| f.name == "fib").unwrap().inclusive_pct,
        100.0
    );
}

#[test]
fn names_carry_start_end_and_id() {
    let n = file_name(5, 10, "ab12");
    assert_eq!(parse_name(&n), Some((5, 10, "ab12".into())));
    assert_eq!(parse_name("5-10-a/b.window.gz"), None);
    assert_eq!(parse_name("5-10-.window.gz"), None);
    assert_eq!(parse_name("x-10-ab.window.gz"), None);
    assert!(valid_id(&random_id()));
    assert_eq!(random_id().len(), 32);
}

#[tokio::test]
async fn wide_listings_leave_out_the_oldest_windows() {
    let h = History::open(None, &settings()).unwrap();
    // Summaries of about 20 KB: some 100 fit in a listing.
    let label = "s".repeat(20_000);
    for i in 0..150u64 {
        h.add_window(
            WindowBuilder::new(&format!("w{i}"), 3000 - i * 10)
                .stack(&label, 1, "x", 1, &["f"], 1)
                .build(),
        )
        .await;
    }
    let list = h.list(0, 0).await.unwrap();
    let listed = list.windows.len() as u64;
    assert!((50..150).contains(&listed), "{listed} listed");
    assert_eq!(list.windows_left_out, 150 - listed);
    assert_eq!(
        list.windows.last().unwrap().id,
        "w149",
        "the newest are kept"
    );
    assert_eq!(list.windows[0].id, format!("w{}", 150 - listed));
    assert_eq!(list.services[0].samples, 150, "services count every window");
    assert!(prost::Message::encoded_len(&list) < 4 << 20);
}

/// The file of window `w` in `dir` (as the history named it).
fn file_of(dir: &Path, w: &api::Window) -> PathBuf {
    dir.join(file_name(w.start_unix_ns, w.end_unix_ns, &w.id))
}

/// Copies of a window under other names (dated 2100, ending before it
/// starts, an hour earlier, not zero-padded) and a file holding another
/// window than its name says are moved aside, counted and never merged: a
/// window counts once, whatever its files.
#[tokio::test]
async fn names_are_checked_against_contents_and_a_window_counts_once() {
    let dir = scratch("names");
    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    let w = WindowBuilder::new("orig", 60)
        .stack("s", 1, "x", 1, &["f"], 5)
        .build();
    h.add_window(w.clone()).await;
    drop(h);
    let (start, end) = (w.start_unix_ns, w.end_unix_ns);
    let original = file_of(&dir, &w);
    let y2100 = 4_102_444_800 * SEC;
    let copies = [
        file_name(y2100, y2100 + 10 * SEC, "orig"),
        file_name(end, start, "orig"),
        file_name(start - 3600 * SEC, end - 3600 * SEC, "orig"),
        format!("{start}-{end}-orig.window.gz"),
    ];
    for name in &copies {
        std::fs::copy(&original, dir.join(name)).unwrap();
    }
    // A name of its own, but the contents of "orig".
    let other = file_name(start, end, "other");
    std::fs::copy(&original, dir.join(&other)).unwrap();

    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    assert_eq!(
        (h.stats().windows, h.stats().damaged),
        (2, 4),
        "the copies' names fail at open"
    );
    for name in &copies {
        assert!(dir.join(format!("{name}.damaged")).exists(), "{name}");
    }
    let list = h.list(0, 0).await.unwrap();
    let ids: Vec<&str> = list.windows.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["orig"], "listed once");
    assert_eq!(list.damaged, 5, "the file holding another window");
    assert!(dir.join(format!("{other}.damaged")).exists());
    let (session, p) = h.query_stacks(&api::Query::default()).await.unwrap();
    assert_eq!(p.attributed, 5, "merged once");
    assert_eq!(session.duration_s, 10.0);
    assert!(original.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// gzip of window `head` (without its services) followed by one service of
/// `n` copies of `stack`, written a stack at a time.
fn bomb(head: &api::Window, stack: &api::WindowStack, n: usize) -> Vec<u8> {
    use flate2::{write::GzEncoder, Compression};
    use prost::encoding::{encode_key, encode_varint, message, WireType};
    use std::io::Write;
    let mut one = Vec::new();
    message::encode(7, stack, &mut one);
    let service = api::ServiceWindow {
        service: "s".into(),
        ..Default::default()
    };
    let mut raw = api::Window {
        services: Vec::new(),
        ..head.clone()
    }
    .encode_to_vec();
    encode_key(9, WireType::LengthDelimited, &mut raw);
    encode_varint((service.encoded_len() + one.len() * n) as u64, &mut raw);
    service.encode_raw(&mut raw);
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&raw).unwrap();
    for _ in 0..n {
        gz.write_all(&one).unwrap();
    }
    gz.finish().unwrap()
}

/// A window whose head says 3 samples but whose stacks go on (27 MiB of
/// them once decompressed, well under any fixed ceiling), and a gzip bomb
/// of zeros: refused as they are read, moved aside and counted; the query
/// answers from the good window.
#[tokio::test]
async fn windows_past_what_they_can_hold_are_refused() {
    let dir = scratch("bomb");
    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    h.add_window(
        WindowBuilder::new("good", 120)
            .stack("s", 1, "x", 1, &["f"], 2)
            .build(),
    )
    .await;
    drop(h);
    let head = WindowBuilder::new("bomb", 60)
        .stack("s", 1, "x", 1, &["f"], 3)
        .build();
    let stack = head.services[0].stacks[0].clone();
    std::fs::write(file_of(&dir, &head), bomb(&head, &stack, 1_000_000)).unwrap();
    let zeros = WindowBuilder::new("zeros", 30).build();
    let gz = {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        for _ in 0..64 {
            gz.write_all(&[0; 1 << 20]).unwrap();
        }
        gz.finish().unwrap()
    };
    std::fs::write(file_of(&dir, &zeros), gz).unwrap();

    let h = History::open(Some(dir.clone()), &settings()).unwrap();
    assert_eq!(h.stats().windows, 3);
    let (_, p) = h.query_stacks(&api::Query::default()).await.unwrap();
    assert_eq!(p.attributed, 2, "only the good window");
    assert_eq!((h.stats().windows, h.stats().damaged), (1, 2));
    assert!(dir
        .join(format!(
            "{}.damaged",
            file_name(head.start_unix_ns, head.end_unix_ns, "bomb")
        ))
        .exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A window that ends before it starts is not kept.
#[tokio::test]
async fn a_window_ending_before_it_starts_is_not_kept() {
    let h = History::open(None, &settings()).unwrap();
    let mut w = WindowBuilder::new("back", 60)
        .stack("s", 1, "x", 1, &["f"], 1)
        .build();
    w.end_unix_ns = w.start_unix_ns - 1;
    h.add_window(w).await;
    assert_eq!((h.stats().windows, h.stats().damaged), (0, 1));
}
