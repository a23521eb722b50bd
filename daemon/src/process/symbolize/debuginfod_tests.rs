//! Tests of the fetcher against HTTP servers made here: a good file, 404,
//! a server slower than the timeout, garbage (not ELF, another build id),
//! a refused connection, the cache's bound; and the symbolizer naming a
//! stripped binary once its debug file arrived.
use super::*;
use crate::process::symbolize::tests::{cc, mapped, run, scratch, symbol, BASE, INLINED};
use crate::process::symbolize::{BlazeSymbolizer, Frame, Symbolizer};
use std::process::Command;
use std::sync::atomic::AtomicUsize;

/// What the test server answers a path with.
#[derive(Clone)]
enum Reply {
    Status(u16),
    Body(Vec<u8>),
    /// Nothing for this long, then an empty 200.
    Slow(Duration),
}

/// An HTTP server on loopback, on a runtime of its own, counting requests.
struct Server {
    url: String,
    hits: Arc<AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

impl Server {
    fn start(reply: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Server {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let (reply, counted) = (Arc::new(reply), hits.clone());
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let (reply, counted) = (reply.clone(), counted.clone());
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let ok = axum::http::StatusCode::OK;
                match reply(uri.path()) {
                    Reply::Status(code) => {
                        (axum::http::StatusCode::from_u16(code).unwrap(), Vec::new())
                    }
                    Reply::Body(body) => (ok, body),
                    Reply::Slow(d) => {
                        tokio::time::sleep(d).await;
                        (ok, Vec::new())
                    }
                }
            }
        });
        rt.spawn(async move { axum::serve(listener, app).await });
        Server { url, hits, _rt: rt }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A URL on loopback that refuses connections.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

/// Polls `ready` until it gives a value; fails after 10 s.
fn until<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A program built with DWARF and a build id in `dir`, its split debug
/// file, and the build id; the program stripped.
fn split_program(dir: &Path, name: &str, source: &str) -> (PathBuf, Vec<u8>, Vec<u8>) {
    split_program_at(dir, name, source, None).0
}

/// [`split_program`], and the file offset of the function `at`.
fn split_program_at(
    dir: &Path,
    name: &str,
    source: &str,
    at: Option<&str>,
) -> ((PathBuf, Vec<u8>, Vec<u8>), u64) {
    let prog = cc(dir, name, source, &["-O2", "-g", "-Wl,--build-id"]);
    let off = at.map_or(0, |f| symbol(&prog, f).0);
    let debug = dir.join(format!("{name}.debug"));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&prog)
        .arg(&debug));
    run(Command::new("strip").arg("--strip-all").arg(&prog));
    let file = std::fs::File::open(&debug).unwrap();
    let id = crate::process::maps::Sections::debug_elf(&file)
        .expect("an ELF file with DWARF")
        .expect("a build id");
    ((prog, std::fs::read(&debug).unwrap(), id), off)
}

/// The path `/buildid/<hex>/debuginfo` of `id`.
fn path_of(id: &[u8]) -> String {
    format!("/buildid/{}/debuginfo", hex(id))
}

fn fetcher(urls: Vec<String>, timeout: Duration, cache_bytes: u64, dir: &Path) -> Fetcher {
    let settings = Settings {
        urls,
        timeout,
        cache_bytes,
    };
    Fetcher::start(settings, dir.join("cache")).unwrap()
}

/// `want` returns at once, whatever the server does.
fn want_quickly(f: &Fetcher, id: &[u8]) {
    let t = Instant::now();
    f.want(id);
    assert!(t.elapsed() < Duration::from_millis(100), "want waited");
}

#[test]
fn urls_are_read_as_elfutils_reads_them() {
    assert_eq!(
        urls_in("  https://a.example/  http://127.0.0.1:8002\tftp://x nonsense\n"),
        vec!["https://a.example/", "http://127.0.0.1:8002"]
    );
    assert!(urls_in("").is_empty());
}

/// A server that has the file: it lands in the cache, checked, after a
/// server that has not; the second server is asked only for it.
#[test]
fn a_good_file_is_fetched_into_the_cache_after_a_404() {
    let dir = scratch("dbgd-good");
    let (_, debug, id) = split_program(&dir, "good", INLINED);
    let want = path_of(&id);
    let none = Server::start(|_| Reply::Status(404));
    let has = Server::start(move |p| match p == want {
        true => Reply::Body(debug.clone()),
        false => Reply::Status(404),
    });
    let f = fetcher(
        vec![none.url.clone(), format!("{}/", has.url)],
        Duration::from_secs(5),
        1 << 30,
        &dir,
    );
    want_quickly(&f, &id);
    let arrived = until("the file", || {
        let a = f.take_arrived();
        (!a.is_empty()).then_some(a)
    });
    assert_eq!(arrived, vec![id.clone()]);
    // Asked again before the symbolizer has taken it: not fetched again.
    want_quickly(&f, &id);
    std::thread::sleep(Duration::from_millis(200));
    let cached = cached_path(f.cache_dir(), &id).unwrap();
    let size = std::fs::metadata(&cached).unwrap().len();
    assert_eq!(std::fs::read(&cached).unwrap().len() as u64, size);
    let s = f.status();
    assert_eq!((s.fetched, s.not_found, s.failed, s.garbage), (1, 1, 0, 0));
    assert_eq!((s.cache_bytes, s.cache_limit_bytes), (size, 1 << 30));
    assert_eq!((none.hits(), has.hits()), (1, 1));
    // Only the file is left in the cache's directory.
    let files: Vec<_> = std::fs::read_dir(cached.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(files, vec![cached.file_name().unwrap().to_os_string()]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// No server has it: counted once, and not asked again at once.
#[test]
fn a_file_no_server_has_is_not_asked_for_again_at_once() {
    let dir = scratch("dbgd-404");
    let server = Server::start(|_| Reply::Status(404));
    let f = fetcher(
        vec![server.url.clone()],
        Duration::from_secs(5),
        1 << 30,
        &dir,
    );
    let id = vec![0xab; 20];
    want_quickly(&f, &id);
    until("a 404", || (f.status().not_found == 1).then_some(()));
    for _ in 0..3 {
        want_quickly(&f, &id);
    }
    std::thread::sleep(Duration::from_millis(200));
    let s = f.status();
    assert_eq!((s.fetched, s.not_found, s.failed, s.garbage), (0, 1, 0, 0));
    assert_eq!(server.hits(), 1);
    assert!(f.take_arrived().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server slower than the timeout: the request fails once the timeout
/// has passed, the failure is counted and said, and nothing waits for it.
#[test]
fn a_server_slower_than_the_timeout_fails_the_request() {
    let dir = scratch("dbgd-slow");
    let server = Server::start(|_| Reply::Slow(Duration::from_secs(30)));
    let f = fetcher(
        vec![server.url.clone()],
        Duration::from_millis(300),
        1 << 30,
        &dir,
    );
    let t = Instant::now();
    want_quickly(&f, &[1; 20]);
    until("a timeout", || (f.status().failed == 1).then_some(()));
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let s = f.status();
    assert!(
        s.last_error.contains("no answer within"),
        "{}",
        s.last_error
    );
    assert_eq!((s.fetched, s.not_found, s.garbage), (0, 0, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Answers that are not the file asked for (not ELF; the debug file of
/// another build id) are counted as garbage and leave nothing in the cache.
#[test]
fn garbage_is_counted_and_dropped() {
    let dir = scratch("dbgd-garbage");
    let (_, debug, other) = split_program(&dir, "other", INLINED);
    let (not_elf, wrong) = (vec![0x11; 20], vec![0x22; 20]);
    let (a, b) = (path_of(&not_elf), path_of(&wrong));
    let server = Server::start(move |p| match p {
        p if p == a => Reply::Body(b"<html>not here</html>".to_vec()),
        p if p == b => Reply::Body(debug.clone()),
        _ => Reply::Status(404),
    });
    let f = fetcher(
        vec![server.url.clone()],
        Duration::from_secs(5),
        1 << 30,
        &dir,
    );
    want_quickly(&f, &not_elf);
    want_quickly(&f, &wrong);
    until("two garbage answers", || {
        (f.status().garbage == 2).then_some(())
    });
    let s = f.status();
    assert_eq!((s.fetched, s.not_found, s.failed), (0, 0, 0));
    assert!(
        s.last_error.contains("not an ELF file") || s.last_error.contains(&hex(&other)),
        "{}",
        s.last_error
    );
    assert!(f.take_arrived().is_empty());
    assert_eq!(s.cache_bytes, 0);
    for id in [&not_elf, &wrong] {
        let place = cached_path(f.cache_dir(), id).unwrap();
        assert!(!place.exists());
        let left = std::fs::read_dir(place.parent().unwrap()).map_or(0, |d| d.count());
        assert_eq!(left, 0, "a temporary file left in {}", place.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server refusing connections: the failure is counted, and the server
/// is skipped for the next build ids (no request, no wait) while the
/// others are still asked.
#[test]
fn a_refused_connection_is_counted_and_the_server_skipped() {
    let dir = scratch("dbgd-refused");
    let other = Server::start(|_| Reply::Status(404));
    let f = fetcher(
        vec![closed_url(), other.url.clone()],
        Duration::from_secs(5),
        1 << 30,
        &dir,
    );
    want_quickly(&f, &[1; 20]);
    until("a refused connection", || {
        let s = f.status();
        (s.failed == 1 && s.not_found == 1).then_some(())
    });
    assert!(!f.status().last_error.is_empty());
    want_quickly(&f, &[2; 20]);
    until("the other server asked", || {
        (f.status().not_found == 2).then_some(())
    });
    let s = f.status();
    assert_eq!((s.fetched, s.failed, s.garbage), (0, 1, 0));
    assert_eq!(other.hits(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The cache keeps to its bytes: the file used longest ago goes.
#[test]
fn the_cache_keeps_to_its_bytes_dropping_the_oldest() {
    let dir = scratch("dbgd-bound");
    let (_, first, a) = split_program(&dir, "first", INLINED);
    let (_, second, b) = split_program(
        &dir,
        "second",
        "int main(void) { return 2; }\nint unused(int x) { return x + 2; }\n",
    );
    let bound = first.len().max(second.len()) as u64 + 100;
    let files = [(path_of(&a), first.clone()), (path_of(&b), second.clone())];
    let server = Server::start(move |p| match files.iter().find(|(f, _)| f == p) {
        Some((_, body)) => Reply::Body(body.clone()),
        None => Reply::Status(404),
    });
    let f = fetcher(
        vec![server.url.clone()],
        Duration::from_secs(5),
        bound,
        &dir,
    );
    f.want(&a);
    until("the first file", || (f.status().fetched == 1).then_some(()));
    f.want(&b);
    until("the second file", || {
        (f.status().fetched == 2).then_some(())
    });
    assert!(!cached_path(f.cache_dir(), &a).unwrap().exists());
    assert!(cached_path(f.cache_dir(), &b).unwrap().exists());
    assert_eq!(f.status().cache_bytes, second.len() as u64);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stripped binary is named with placeholders until its debug file
/// arrives from the server; then the symbolizer's debug generation rises
/// and the same addresses are named from it, inlined frames and lines
/// included.
#[test]
fn a_stripped_binary_is_named_once_its_debug_file_arrives() {
    let dir = scratch("dbgd-names");
    let ((prog, debug, id), off) = split_program_at(&dir, "named", INLINED, Some("outer"));
    let start = {
        use object::{Object, ObjectSymbol};
        let file = object::File::parse(&*debug).unwrap();
        let outer = file.symbols().find(|s| s.name() == Ok("outer"));
        outer.expect("outer in the debug file").address()
    };
    let want = path_of(&id);
    let server = Server::start(move |p| match p == want {
        true => Reply::Body(debug.clone()),
        false => Reply::Status(404),
    });
    let f = fetcher(
        vec![server.url.clone()],
        Duration::from_secs(5),
        1 << 30,
        &dir,
    );
    let sym = BlazeSymbolizer::with_debuginfod(
        vec![dir.join("nowhere")],
        Some(f.clone()),
        crate::process::symbolize::Naming::OnHost,
    );
    assert_eq!(sym.debug_generation(), Some(0));
    let frames = sym.symbolize(&mapped(&prog), &[BASE + off]);
    let origin = profd_common::model::Origin {
        build_id: hex(&id),
        address: start,
    };
    assert_eq!(
        frames[0],
        vec![Frame::unnamed_in(
            format!("named!{start:#x}"),
            "named",
            origin
        )]
    );
    until("the debug file's arrival", || {
        (sym.debug_generation() == Some(1)).then_some(())
    });
    let frames = sym.symbolize(&mapped(&prog), &[BASE + off]);
    let f0 = &frames[0];
    assert_eq!(f0.last().unwrap().func.name, "outer", "{f0:?}");
    assert!(f0.iter().all(|f| f.named));
    assert!(
        f0[0].file.as_deref().unwrap().ends_with("named.c"),
        "{f0:?}"
    );
    assert_eq!(f.status().fetched, 1);
    assert_eq!(server.hits(), 1);
    // Without a fetcher, no generation: nothing ever arrives.
    assert_eq!(BlazeSymbolizer::default().debug_generation(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
