//! Tests of the Ruby reader on Debian's real ruby: a live two-thread
//! program read from outside while it waits, and the session merge.
use super::*;
use crate::process::maps::ProcessMaps;
use std::process::Child;

/// A real ruby running `script`, once it printed its first line.
fn ruby(script: &str) -> (Child, u32) {
    let (child, ready) = crate::process::interpreted::spawn_ready("/usr/bin/ruby", &["-e", script]);
    assert_eq!(ready, "ready\n");
    let pid = child.id();
    (child, pid)
}

#[test]
fn versions_parse_as_ruby_version_spells_them() {
    let v = Version::parse(b"3.1.2\0junk").unwrap();
    assert_eq!((v.major, v.minor, v.patch), (3, 1, 2));
    assert_eq!(v.to_string(), "3.1.2");
    assert!(Version::parse(b"3.1\0").is_none());
    assert!(Version::parse(b"x.1.2\0").is_none());
    assert!(layout::of(v).is_some());
    assert!(layout::of(Version::parse(b"3.3.0").unwrap()).is_none());
    assert!(may_be_ruby("libruby-3.1.so.3.1.2"));
    assert!(may_be_ruby("ruby"));
    assert!(!may_be_ruby("python3.11"));
}

/// Debian's ruby: 3.1, its `rb_vm_exec` from the dynamic symbols, and its
/// `vm_exec_core` (which has no symbol) found where the unwind table has a
/// function of its own, just before `rb_vm_exec`.
#[test]
fn a_live_ruby_is_found_with_its_version_and_vm_loop() {
    let (mut child, pid) = ruby("puts 'ready'; $stdout.flush; $stdin.read");
    let maps = ProcessMaps::read(pid).unwrap();
    let process = Process::find(pid, &maps).unwrap().expect("ruby runs CRuby");
    let i = &process.interpreter;
    assert_eq!((i.version.major, i.version.minor), (3, 1), "{}", i.version);
    assert!(i.exec.end - i.exec.start > 1000, "{:x?}", i.exec);
    assert_eq!(i.core.end, i.exec.start, "{:x?}", i.core);
    // Debian 3.1.2's: 0x24ebd0..0x253047 in the file, then padding.
    let size = i.core.end - i.core.start;
    assert!((16 * 1024..64 * 1024).contains(&size), "{size}");
    assert!(i.config().is_ok());
    // A process of no Ruby is none.
    let own = ProcessMaps::read(std::process::id()).unwrap();
    assert!(Process::find(std::process::id(), &own).unwrap().is_none());
    drop(child.stdin.take());
    child.wait().unwrap();
}

/// A real ruby whose main thread waits in `Work#wait`, called from a block
/// of `Work#outer` that `Array#each` runs, called from the singleton method
/// `Deep::Call.run` of a class in a module, and whose second thread sleeps
/// in `Work.nap`: each thread's frames are its own, read by its native id,
/// named by class and label, file and line, and the frames that end a call
/// of the VM loop are the first of each batch.
#[test]
fn a_live_rubys_threads_have_their_own_frames() {
    let script = "\
class Work
  def self.nap
    sleep 100
  end
  def wait
    $stdin.read
  end
  def outer
    [1].each { |x| wait }
  end
end
module Deep
  class Call
    def self.run
      Work.new.outer
    end
  end
end
Thread.new { Work.nap }
sleep 0.1 while Thread.list.size < 2
sleep 0.2
puts 'ready'; $stdout.flush
Deep::Call.run
";
    let (mut child, pid) = ruby(script);
    let maps = ProcessMaps::read(pid).unwrap();
    let mut process = Process::find(pid, &maps).unwrap().expect("CRuby");
    let named = |process: &mut Process, tid: u32| {
        let record = process.record_now(tid);
        assert_eq!(record.status, Status::Read, "thread {tid}");
        let frames = process.name(&record).unwrap();
        // Named again from the cache: the same.
        assert_eq!(process.name(&record).unwrap(), frames);
        frames
            .iter()
            .map(|f| {
                (
                    f.name.to_string(),
                    f.file.to_string(),
                    f.first_line,
                    f.line,
                    f.entry,
                )
            })
            .collect::<Vec<_>>()
    };
    // The threads are on their way to where they wait once it printed.
    let settled = |process: &mut Process, tid: u32, innermost: &str| {
        let mut frames = named(process, tid);
        for _ in 0..200 {
            if frames.first().is_some_and(|f| f.0 == innermost) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            frames = named(process, tid);
        }
        frames
    };
    let main = settled(&mut process, pid, "Work#wait");
    let e = "-e".to_string();
    assert_eq!(
        main,
        [
            ("Work#wait".into(), e.clone(), 5, 6, false),
            ("block in Work#outer".into(), e.clone(), 9, 9, true),
            ("Work#outer".into(), e.clone(), 8, 9, false),
            ("Deep::Call.run".into(), e.clone(), 14, 15, false),
            ("<main>".into(), e.clone(), 0, 23, true),
        ],
    );
    let tasks: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| t.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    let others: Vec<_> = (tasks.iter())
        .filter(|&&t| t != pid)
        .map(|&t| (t, process.record_now(t)))
        .filter(|(_, r)| r.status == Status::Read)
        .collect();
    assert_eq!(others.len(), 1, "one Ruby thread besides the main one");
    let other = settled(&mut process, others[0].0, "Work.nap");
    assert_eq!(
        other,
        [
            ("Work.nap".into(), e.clone(), 2, 3, false),
            ("block in <main>".into(), e.clone(), 19, 19, true),
        ],
    );
    // A thread id no Ruby thread has.
    assert_eq!(process.record_now(1).status, Status::NoThread);
    // An iseq that is not what the sample saw is not named from the cache.
    let mut record = process.record_now(pid);
    record.frames[1].identity[3] ^= 8;
    assert!(process.name(&record).is_err());
    record.frames[1].identity[3] ^= 8;
    record.frames[1].identity[0] ^= 8;
    assert!(process.name(&record).is_err());
    drop(child.stdin.take());
    child.wait().unwrap();
    assert_eq!(process.record_now(pid).status, Status::Fault);
}
