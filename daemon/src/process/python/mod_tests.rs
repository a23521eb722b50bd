//! Tests of the stack reader on Debian's real python3: a script whose two
//! threads wait in known functions, read from outside while they wait.
use super::*;
use std::path::{Path, PathBuf};
use std::process::Child;

const SCRIPT: &str = r#"import os, sys, threading
r, w = os.pipe()

class Worker:
    def wait_here(self):
        os.read(r, 1)

def t_outer():
    Worker().wait_here()

def m_inner():
    print("ready", threading.get_native_id(), t.native_id, flush=True)
    sys.stdin.read()

def m_outer():
    m_inner()

t = threading.Thread(target=t_outer)
t.start()
while t.native_id is None:
    pass
m_outer()
os.write(w, b"x")
t.join()
"#;

/// The line of `text` in the script (1-based).
fn line(text: &str) -> u32 {
    let at = SCRIPT.lines().position(|l| l.contains(text)).unwrap();
    at as u32 + 1
}

/// The line of the script that is `text`.
fn line_is(text: &str) -> u32 {
    let at = SCRIPT.lines().position(|l| l == text).unwrap();
    at as u32 + 1
}

struct Running {
    child: Child,
    file: PathBuf,
    main: u32,
    thread: u32,
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Debian's interpreter (not another one earlier in PATH).
const DEBIAN: &str = "/usr/bin/python3";

fn start(python: &str, name: &str) -> Running {
    let file = std::env::temp_dir().join(format!("profd-py-{name}-{}.py", std::process::id()));
    std::fs::write(&file, SCRIPT).unwrap();
    let (child, ready) =
        crate::process::interpreted::spawn_ready(python, &[file.to_str().unwrap()]);
    let ids: Vec<u32> = ready
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{ready:?}");
    // Both threads wait in read(2) (syscall 0) before they are read: the
    // main thread is past its print, on the line that reads.
    let pid = child.id();
    for tid in &ids {
        let path = format!("/proc/{pid}/task/{tid}/syscall");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !std::fs::read_to_string(&path).is_ok_and(|s| s.starts_with("0 ")) {
            assert!(
                std::time::Instant::now() < deadline,
                "thread {tid} never waited in read"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    Running {
        child,
        file,
        main: ids[0],
        thread: ids[1],
    }
}

fn names(frames: &[PyFrame]) -> Vec<&str> {
    frames.iter().map(|f| &*f.name).collect()
}

/// Both threads' frames, innermost first, with the script's file, each
/// function's first line and the line it waits on or calls from; the
/// worker thread's frames end in threading's own.
#[test]
fn a_running_interpreters_threads_are_read_from_outside() {
    read_from_outside(DEBIAN, 11);
}

/// The checks of [`check_stacks`] on the interpreter at `path`, of version
/// 3.`minor`, running the script; the reads it made, with what the image
/// must show.
fn read_from_outside(path: &str, minor: u8) -> String {
    let run = start(path, &format!("threads-{minor}"));
    let pid = run.child.id();
    let maps = ProcessMaps::read(pid).unwrap();
    let mem = ProcessMemory::open(pid).unwrap();
    let python = Interpreter::find(pid, &maps, &mem)
        .unwrap()
        .expect("an interpreter");
    assert_eq!(python.version, Version { major: 3, minor });
    let recorded = crate::process::memory::Recorder::new(&mem);
    let file = run.file.display().to_string();
    check_stacks(&python, &recorded, run.main, run.thread, &file);
    let pthread_tid = match &python.pthread_tid {
        Ok(at) => format!("pthread_tid {at}\n"),
        Err(_) => String::new(),
    };
    format!(
        "version 3.{minor}\nruntime {:#x}\nmain {}\nthread {}\nfile {file}\n{pthread_tid}{}",
        python.runtime,
        run.main,
        run.thread,
        recorded.image()
    )
}

/// What the script's two threads must show, read through `mem`.
fn check_stacks(
    python: &Interpreter,
    mem: &impl Memory,
    main_tid: u32,
    thread_tid: u32,
    file: &str,
) {
    let mut ids: Vec<u32> = python.threads(mem).unwrap().iter().map(|t| t.0).collect();
    ids.sort();
    let mut want = vec![main_tid, thread_tid];
    want.sort();
    assert_eq!(ids, want);

    // Names are qualified by their class from 3.11 on.
    let qualified = python.version.minor >= 11;
    let mut codes = Codes::default();
    let main = python.stack(mem, &mut codes, main_tid).unwrap();
    assert_eq!(names(&main), ["m_inner", "m_outer", "<module>"]);
    assert!(main.iter().all(|f| *f.file == *file), "{main:?}");
    let lines: Vec<(u32, u32)> = main.iter().map(|f| (f.first_line, f.line)).collect();
    assert_eq!(
        lines,
        [
            (line("def m_inner"), line("sys.stdin.read()")),
            (line("def m_outer"), line("    m_inner()")),
            (1, line_is("m_outer()")),
        ]
    );

    let worker = python.stack(mem, &mut codes, thread_tid).unwrap();
    let class = |name: &'static str| match qualified {
        true => name,
        false => name.rsplit('.').next().unwrap(),
    };
    assert_eq!(
        names(&worker)[..2],
        [class("Worker.wait_here"), "t_outer"],
        "{worker:?}"
    );
    assert_eq!(worker[0].line, line("os.read(r, 1)"));
    assert_eq!(
        names(&worker)[2..],
        ["Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap"].map(class)
    );
    assert!(worker[2].file.ends_with("threading.py"));

    if qualified {
        // Each thread's outermost frame was the first its eval loop ran (a
        // Python function called from Python runs in the same loop).
        assert!(main.last().unwrap().entry && !main[0].entry);
        assert!(worker.last().unwrap().entry);
    } else {
        // Before 3.11 each Python call is a call of the eval loop.
        assert!(main.iter().chain(&worker).all(|f| f.entry));
    }

    // Read again: every code object comes from what was kept.
    let held = codes.held();
    assert_eq!(python.stack(mem, &mut codes, main_tid).unwrap(), main);
    assert_eq!(codes.held(), held);
    assert!(matches!(
        python.stack(mem, &mut codes, 1),
        Err(ReadError::NoThread(1))
    ));
}

/// Where the images of real interpreters running the script are kept.
fn images() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/process/python/images")
}

/// Images of CPython 3.8, 3.9, 3.10, 3.12 and 3.13 (pyenv builds) running the script, made
/// by `make_images`: the reads a stack read made, replayed, give what the
/// script's construction says.
#[test]
fn images_of_real_interpreters_read_as_the_script_says() {
    for minor in [8u8, 9, 10, 12, 13] {
        let text = std::fs::read_to_string(images().join(format!("cpython-3.{minor}.txt")))
            .expect("an image");
        let mut head = text.lines().take(5).map(|l| l.split_once(' ').unwrap().1);
        let version = head.next().unwrap();
        assert_eq!(version, format!("3.{minor}"));
        let runtime =
            u64::from_str_radix(head.next().unwrap().trim_start_matches("0x"), 16).unwrap();
        let main: u32 = head.next().unwrap().parse().unwrap();
        let thread: u32 = head.next().unwrap().parse().unwrap();
        let file = head.next().unwrap();
        let pthread_tid = (text.lines().nth(5))
            .and_then(|l| l.strip_prefix("pthread_tid "))
            .map(|at| at.parse().unwrap())
            .ok_or_else(|| "not needed".to_string());
        let image = crate::process::memory::Image::parse(&text).unwrap();
        let version = Version { major: 3, minor };
        let python = Interpreter {
            version,
            runtime,
            eval: 0..0,
            layout: layout::of(version),
            pthread_tid,
        };
        check_stacks(&python, &image, main, thread, file);
    }
}

/// Remakes the images from the pyenv interpreters at these paths (not a
/// check: run it by name with `--ignored` when a layout changes).
#[test]
#[ignore]
fn make_images() {
    for (path, minor) in [
        ("/root/.pyenv/versions/3.8.18/bin/python3.8", 8),
        ("/root/.pyenv/versions/3.9.18/bin/python3.9", 9),
        ("/root/.pyenv/versions/3.10.13/bin/python3.10", 10),
        ("/root/.pyenv/versions/3.12.1/bin/python3.12", 12),
        ("/root/.pyenv/versions/3.13.0/bin/python3.13", 13),
    ] {
        let image = read_from_outside(path, minor);
        std::fs::create_dir_all(images()).unwrap();
        std::fs::write(images().join(format!("cpython-3.{minor}.txt")), image).unwrap();
    }
}

/// A process that runs no Python has no interpreter; one that exited
/// cannot be read.
#[test]
fn other_processes_have_no_interpreter() {
    let me = std::process::id();
    let maps = ProcessMaps::read(me).unwrap();
    let mem = ProcessMemory::open(me).unwrap();
    assert!(Interpreter::find(me, &maps, &mem).unwrap().is_none());

    let run = start(DEBIAN, "exits");
    let pid = run.child.id();
    let maps = ProcessMaps::read(pid).unwrap();
    let mem = ProcessMemory::open(pid).unwrap();
    let python = Interpreter::find(pid, &maps, &mem).unwrap().unwrap();
    let mut run = run;
    drop(run.child.stdin.take());
    run.child.wait().unwrap();
    let mut codes = Codes::default();
    assert!(matches!(
        python.stack(&mem, &mut codes, run.main),
        Err(ReadError::Fault { .. })
    ));
}
