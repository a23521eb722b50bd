//! Interpreter frames in a session's stacks (Python, Ruby and Perl). A
//! sample of a process running CPython, CRuby or Perl has its thread's
//! interpreter frames, read at the sample (see [`crate::os::bpf`]), put in
//! place of the native frames that ran them (the eval loop's,
//! `rb_vm_exec`'s, `Perl_runops_standard`'s), as py-spy
//! `--native` shows them; each distinct interpreter frame (runtime,
//! function, file, line) is one address of a range of its own, named from
//! this table. A read that fails, or does not fit the native stack, puts
//! [`PY_UNREADABLE_FRAME`] (or [`RB_UNREADABLE_FRAME`],
//! [`PL_UNREADABLE_FRAME`]) in place of those native frames instead, and is
//! counted.
use crate::os::bpf::Record;
use crate::process::interpreted::{Frame as PyFrame, Interpreted, Runtime};
use indexmap::IndexSet;
use std::sync::Arc;

/// The frame in place of eval-loop frames whose Python frames could not
/// be read; named `[python: unreadable]`.
pub const PY_UNREADABLE_FRAME: u64 = u64::MAX - 3;

/// The frame in place of `rb_vm_exec` frames whose Ruby frames could not
/// be read; named `[ruby: unreadable]`.
pub const RB_UNREADABLE_FRAME: u64 = u64::MAX - 4;

/// The frame in place of `Perl_runops_standard` frames whose Perl frames
/// could not be read; named `[perl: unreadable]`.
pub const PL_UNREADABLE_FRAME: u64 = u64::MAX - 5;

/// Python frames are the addresses from here up: above every user address
/// (below 2^47) of the target's space, below every kernel address, and
/// never tagged with a space.
const PY_BASE: u64 = 1 << 47;

/// Distinct Python frames (function and line) a session keeps at most, about
/// 64 bytes each; a frame past it is counted as unreadable. Continuous
/// profiling lets go of them when no stack refers to one.
pub const MAX_FRAMES: usize = 1 << 16;

/// An interpreter frame as the table keys it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub runtime: Runtime,
    pub name: Arc<str>,
    pub file: Arc<str>,
    pub first_line: u32,
    pub line: u32,
}

/// The interpreter frames met in a session's stacks.
#[derive(Default)]
pub struct PyFrames {
    frames: IndexSet<Key, foldhash::fast::RandomState>,
    /// How far from their samples' times the frames were read, in
    /// nanoseconds: the last [`LAGS_KEPT`] reads.
    lags: Vec<u32>,
    reads: u64,
}

/// Read lags kept for their median and 99th percentile.
const LAGS_KEPT: usize = 1 << 14;

/// How far from their samples' times a session's Python frames were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    pub reads: u64,
    pub median_ns: u32,
    pub p99_ns: u32,
}

/// What became of a sample's stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// It ran no interpreted code (no eval-loop frame): as it was.
    Native,
    /// Its eval-loop frames are now the interpreter frames they ran.
    Interpreted,
    /// Its eval-loop frames are now [`PY_UNREADABLE_FRAME`] (or
    /// [`RB_UNREADABLE_FRAME`], [`PL_UNREADABLE_FRAME`]).
    Unreadable,
}

impl PyFrames {
    /// The frame of address `addr`, if it is a Python frame's.
    pub fn frame(&self, addr: u64) -> Option<&Key> {
        let index = addr.checked_sub(PY_BASE)?;
        self.frames.get_index(usize::try_from(index).ok()?)
    }

    /// Whether `addr` is a Python frame's.
    pub fn is_python(addr: u64) -> bool {
        (PY_BASE..PY_BASE + MAX_FRAMES as u64).contains(&addr)
    }

    /// Note a read made `lag_ns` from its sample's time.
    pub fn read_at(&mut self, lag_ns: u64) {
        let ns = u32::try_from(lag_ns).unwrap_or(u32::MAX);
        match self.lags.len() < LAGS_KEPT {
            true => self.lags.push(ns),
            false => self.lags[(self.reads % LAGS_KEPT as u64) as usize] = ns,
        }
        self.reads += 1;
    }

    /// The lag of the reads so far (of the last [`LAGS_KEPT`]); None
    /// before the first.
    pub fn lag(&self) -> Option<Lag> {
        let mut lags = self.lags.clone();
        lags.sort_unstable();
        let at = |q: usize| lags[(lags.len() - 1) * q / 100];
        (!lags.is_empty()).then(|| Lag {
            reads: self.reads,
            median_ns: at(50),
            p99_ns: at(99),
        })
    }

    /// Frames held.
    pub fn held(&self) -> usize {
        self.frames.len()
    }

    /// Forget every frame (no stack refers to one any more).
    pub fn clear(&mut self) {
        self.frames.clear();
    }

    fn address(&mut self, runtime: Runtime, frame: &PyFrame) -> u64 {
        let key = Key {
            runtime,
            name: frame.name.clone(),
            file: frame.file.clone(),
            first_line: frame.first_line,
            line: frame.line,
        };
        if self.frames.len() >= MAX_FRAMES && !self.frames.contains(&key) {
            return unreadable(runtime);
        }
        PY_BASE + self.frames.insert_full(key).0 as u64
    }

    /// `stack` (innermost first; addresses as in the process, `plain`
    /// turning a tagged one back) of a thread of `process`, with the
    /// interpreter frames in place of its eval-loop frames (and without its
    /// loop's), into `out`. `record`: the thread's frames as read at the
    /// sample taken at `time`, if they were; looked up only for a stack
    /// that ran interpreted code.
    pub fn merge(
        &mut self,
        process: &mut dyn Interpreted,
        time: u64,
        record: impl FnOnce() -> Option<Arc<Record>>,
        stack: &[u64],
        plain: impl Fn(u64) -> u64,
        out: &mut Vec<u64>,
    ) -> Merged {
        let evals = stack.iter().filter(|&&a| process.is_eval(plain(a))).count();
        if evals == 0 {
            return Merged::Native;
        }
        out.clear();
        let record = record();
        if let Some(r) = &record {
            self.read_at(r.time.abs_diff(time));
        }
        let runtime = process.runtime();
        let unreadable = unreadable(runtime);
        let read = match record.map(|r| process.name(&r)) {
            Some(Ok(frames)) => frames,
            Some(Err(err)) => {
                tracing::trace!(%err, ?runtime, "interpreter frames not read");
                Vec::new()
            }
            None => Vec::new(),
        };
        // The frames each eval-loop call ran: up to and including the
        // first it was entered with, innermost first.
        let mut runs: Vec<std::ops::Range<usize>> = Vec::with_capacity(evals);
        let mut start = 0;
        for (i, f) in read.iter().enumerate() {
            if f.entry {
                runs.push(start..i + 1);
                start = i + 1;
            }
        }
        // Native frames of the interpreter's loop are what its frames
        // stand for.
        let kept = stack.iter().filter(|&&a| !process.is_loop(plain(a)));
        if runs.len() != evals || start != read.len() {
            out.extend(kept.map(|&a| match process.is_eval(plain(a)) {
                true => unreadable,
                false => a,
            }));
            out.dedup_by(|a, b| *a == unreadable && *b == unreadable);
            return Merged::Unreadable;
        }
        let mut runs = runs.into_iter();
        for &a in kept {
            if !process.is_eval(plain(a)) {
                out.push(a);
                continue;
            }
            for f in &read[runs.next().unwrap_or_default()] {
                let addr = self.address(runtime, f);
                out.push(addr);
            }
        }
        Merged::Interpreted
    }
}

/// The frame standing for native frames of `runtime` whose interpreter
/// frames could not be read.
fn unreadable(runtime: Runtime) -> u64 {
    match runtime {
        Runtime::Python => PY_UNREADABLE_FRAME,
        Runtime::Ruby => RB_UNREADABLE_FRAME,
        Runtime::Perl => PL_UNREADABLE_FRAME,
    }
}

/// The function an interpreter frame is in: for Python `module.qualname`,
/// the module named from its file (`script.py` → `script`); for Ruby its
/// label (`Class#method`, `block in Class#method`, `<main>`); for Perl
/// `Package::sub`.
pub fn function_name(key: &Key) -> String {
    if key.runtime != Runtime::Python {
        return key.name.to_string();
    }
    let file = key.file.rsplit('/').next().unwrap_or(&key.file);
    let module = file.strip_suffix(".py").unwrap_or(file);
    format!("{module}.{}", key.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::bpf::Record;
    use crate::process::interpreted::{spawn_ready, Interpreted};
    use crate::process::maps::ProcessMaps;
    use crate::process::python::Process;

    /// What `record_now` reads of `process` once it names four frames (or
    /// after four seconds).
    fn four_frames<P: Interpreted>(process: &mut P, record_now: impl Fn(&P) -> Record) -> Record {
        let mut now = record_now(process);
        for _ in 0..200 {
            if process.name(&now).is_ok_and(|f| f.len() == 4) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            now = record_now(process);
        }
        now
    }

    /// A real python3 waiting in `inner()` called by `outer()`, read from
    /// outside: a native stack with its one eval-loop frame gets the three
    /// Python frames in that frame's place, the same frames the same
    /// addresses; one with two eval-loop frames does not fit and gets
    /// `[python: unreadable]` once in place of both.
    #[test]
    fn eval_loop_frames_become_the_python_frames_they_ran() {
        let script = "import sys\ndef inner():\n    print('ready', flush=True)\n    sys.stdin.read()\ndef outer():\n    inner()\nouter()\n";
        let (mut child, _) = spawn_ready("/usr/bin/python3", &["-c", script]);
        let pid = child.id();
        let maps = ProcessMaps::read(pid).unwrap();
        let mut process = Process::find(pid, &maps)
            .unwrap()
            .expect("python3 runs CPython");
        let eval = process.interpreter.eval.start + 16;
        let mut frames = PyFrames::default();
        let mut out = Vec::new();

        let now = process.record_now(pid);
        let native = [0x1000, 0x2000];
        let merged = frames.merge(
            &mut process,
            0,
            || Some(Arc::new(now.clone())),
            &native,
            |a| a,
            &mut out,
        );
        assert_eq!(merged, Merged::Native);

        let stack = [0x1000, eval, 0x2000];
        assert_eq!(
            frames.merge(
                &mut process,
                0,
                || Some(Arc::new(now.clone())),
                &stack,
                |a| a,
                &mut out
            ),
            Merged::Interpreted
        );
        assert_eq!(out.len(), 5, "{out:x?}");
        assert_eq!((out[0], out[4]), (0x1000, 0x2000));
        let names: Vec<String> = out[1..4]
            .iter()
            .map(|&a| function_name(frames.frame(a).unwrap()))
            .collect();
        assert_eq!(
            names,
            ["<string>.inner", "<string>.outer", "<string>.<module>"]
        );
        assert!(out[1..4].iter().all(|&a| PyFrames::is_python(a)));
        let first = out.clone();
        frames.merge(
            &mut process,
            0,
            || Some(Arc::new(now.clone())),
            &stack,
            |a| a,
            &mut out,
        );
        assert_eq!(out, first);
        assert_eq!(frames.held(), 3);

        let two = [0x1000, eval, 0x3000, eval + 8, 0x2000];
        assert_eq!(
            frames.merge(
                &mut process,
                0,
                || Some(Arc::new(now.clone())),
                &two,
                |a| a,
                &mut out
            ),
            Merged::Unreadable
        );
        assert_eq!(
            out,
            [
                0x1000,
                PY_UNREADABLE_FRAME,
                0x3000,
                PY_UNREADABLE_FRAME,
                0x2000
            ]
        );

        // A thread of no Python thread state, a sample with no read and a
        // process gone: unreadable too.
        let none = process.record_now(1);
        assert_eq!(none.status, crate::os::bpf::Status::NoThread);
        assert_eq!(
            frames.merge(
                &mut process,
                0,
                || Some(Arc::new(none.clone())),
                &stack,
                |a| a,
                &mut out
            ),
            Merged::Unreadable
        );
        assert_eq!(
            frames.merge(&mut process, 0, || None, &stack, |a| a, &mut out),
            Merged::Unreadable
        );
        drop(child.stdin.take());
        child.wait().unwrap();
        let gone = process.record_now(pid);
        assert_eq!(gone.status, crate::os::bpf::Status::Fault);
        assert_eq!(
            frames.merge(
                &mut process,
                0,
                || Some(Arc::new(gone.clone())),
                &stack,
                |a| a,
                &mut out
            ),
            Merged::Unreadable
        );
        assert_eq!(out, [0x1000, PY_UNREADABLE_FRAME, 0x2000]);
    }

    /// A real ruby waiting in `Work#wait`, called from a block of
    /// `Work#outer` that `Array#each` runs: a native stack with its two
    /// `rb_vm_exec` frames, each with `vm_exec_core`'s under it, gets the
    /// four Ruby frames in their place (two each, the loop's frames gone);
    /// one with a single `rb_vm_exec` frame does not fit and gets
    /// `[ruby: unreadable]`.
    #[test]
    fn rb_vm_exec_frames_become_the_ruby_frames_they_ran() {
        let script = "class Work\n  def wait\n    $stdin.read\n  end\n  def outer\n    [1].each { wait }\n  end\nend\nputs 'ready'\n$stdout.flush\nWork.new.outer\n";
        let (mut child, _) = spawn_ready("/usr/bin/ruby", &["-e", script]);
        let pid = child.id();
        let maps = ProcessMaps::read(pid).unwrap();
        let mut process = crate::process::ruby::Process::find(pid, &maps)
            .unwrap()
            .expect("ruby runs CRuby");
        // Once it printed, it is on its way to `$stdin.read`.
        let now = four_frames(&mut process, |p| p.record_now(pid));
        let (exec, core) = (
            process.interpreter.exec.start,
            process.interpreter.core.start,
        );
        let mut frames = PyFrames::default();
        let mut out = Vec::new();
        let stack = [
            0x1000,
            core + 16,
            exec + 16,
            0x3000,
            core + 8,
            exec + 8,
            0x2000,
        ];
        let record = || Some(Arc::new(now.clone()));
        let merged = frames.merge(&mut process, 0, record, &stack, |a| a, &mut out);
        assert_eq!(merged, Merged::Interpreted);
        assert_eq!(out.len(), 7, "{out:x?}");
        assert_eq!((out[0], out[3], out[6]), (0x1000, 0x3000, 0x2000));
        let name = |a: u64| function_name(frames.frame(a).unwrap());
        assert_eq!(
            [out[1], out[2], out[4], out[5]].map(name),
            ["Work#wait", "block in Work#outer", "Work#outer", "<main>"]
        );
        assert_eq!(frames.frame(out[1]).unwrap().runtime, Runtime::Ruby);

        let one = [0x1000, core + 16, exec + 16, 0x2000];
        let record = || Some(Arc::new(now.clone()));
        let merged = frames.merge(&mut process, 0, record, &one, |a| a, &mut out);
        assert_eq!(merged, Merged::Unreadable);
        assert_eq!(out, [0x1000, RB_UNREADABLE_FRAME, 0x2000]);
        drop(child.stdin.take());
        child.wait().unwrap();
    }
    /// A real perl waiting in `Work::pause`, called from `main::inner`,
    /// called from a sort block of the main program: a native stack with
    /// its two `Perl_runops_standard` frames (the main program's, and the
    /// one pp_sort runs the block in) gets the Perl frames in their place;
    /// one with a single run-loop frame does not fit and gets
    /// `[perl: unreadable]`.
    #[test]
    fn runops_frames_become_the_perl_frames_they_ran() {
        let script = "package Work;\nsub pause { $| = 1; print qq(ready\\n); <STDIN> }\npackage main;\nsub inner { Work::pause(); 0 }\nmy @s = sort { inner() } 2, 1;\n";
        let (mut child, _) = spawn_ready("/usr/bin/perl", &["-e", script]);
        let pid = child.id();
        let maps = ProcessMaps::read(pid).unwrap();
        let mut process = crate::process::perl::Process::find(pid, &maps)
            .unwrap()
            .expect("perl runs Perl");
        // Once it printed, it is on its way to `<STDIN>`.
        let now = four_frames(&mut process, |p| p.record_now(pid));
        let runops = process.interpreter.runops[0].start;
        let mut frames = PyFrames::default();
        let mut out = Vec::new();
        let stack = [0x1000, runops + 16, 0x3000, runops + 8, 0x2000];
        let record = || Some(Arc::new(now.clone()));
        let merged = frames.merge(&mut process, 0, record, &stack, |a| a, &mut out);
        assert_eq!(merged, Merged::Interpreted);
        assert_eq!(out.len(), 7, "{out:x?}");
        // The sort block's run: pause, inner and the block (named after the
        // main program it is in); then the main program's.
        assert_eq!((out[0], out[4], out[6]), (0x1000, 0x3000, 0x2000));
        let name = |a: u64| function_name(frames.frame(a).unwrap());
        assert_eq!(
            [out[1], out[2], out[3], out[5]].map(name),
            [
                "Work::pause",
                "main::inner",
                "main::RUNTIME",
                "main::RUNTIME"
            ]
        );
        assert_eq!(frames.frame(out[1]).unwrap().runtime, Runtime::Perl);
        assert_eq!(frames.frame(out[2]).unwrap().line, 4);

        let one = [0x1000, runops + 16, 0x2000];
        let record = || Some(Arc::new(now.clone()));
        let merged = frames.merge(&mut process, 0, record, &one, |a| a, &mut out);
        assert_eq!(merged, Merged::Unreadable);
        assert_eq!(out, [0x1000, PL_UNREADABLE_FRAME, 0x2000]);
        drop(child.stdin.take());
        child.wait().unwrap();
    }
}
