//! Tests of the Perl reader on Debian's real perl: its files and version
//! recognised, and a live program read from outside while it waits.
use super::*;
use crate::process::maps::ProcessMaps;
use std::process::Child;

/// A real perl running `script`, once it printed its first line.
fn perl(script: &str) -> (Child, u32) {
    let (child, ready) = crate::process::interpreted::spawn_ready("/usr/bin/perl", &["-e", script]);
    assert_eq!(ready, "ready\n");
    let pid = child.id();
    (child, pid)
}

#[test]
fn perl_files_and_versions_are_recognised() {
    assert!(may_be_perl("perl"));
    assert!(may_be_perl("perl5.36.0"));
    assert!(may_be_perl("libperl.so.5.36.0"));
    assert!(!may_be_perl("perlbug"));
    assert!(!may_be_perl("python3.11"));
    let v = Version {
        revision: 5,
        version: 36,
        subversion: 0,
    };
    assert_eq!(v.to_string(), "5.36.0");
    assert!(layout::of(v).is_some());
    assert!(layout::of(Version { version: 38, ..v }).is_none());
}

/// Debian's perl: a static `/usr/bin/perl` of version 5.36, a threaded
/// build (with `PL_curinterp`), its run loop from the dynamic symbols.
#[test]
fn a_live_perl_is_found_with_its_version_and_run_loop() {
    let (mut child, pid) = perl("$| = 1; print qq(ready\\n); <STDIN>;");
    let maps = ProcessMaps::read(pid).unwrap();
    let process = Process::find(pid, &maps).unwrap().expect("perl runs Perl");
    let i = &process.interpreter;
    assert_eq!(
        (i.version.revision, i.version.version),
        (5, 36),
        "{}",
        i.version
    );
    assert!(i.curinterp.is_some());
    assert!(
        i.runops.iter().any(|r| r.end - r.start > 16),
        "{:x?}",
        i.runops
    );
    assert!(i.config().is_ok());
    // A process of no Perl is none.
    let own = ProcessMaps::read(std::process::id()).unwrap();
    assert!(Process::find(std::process::id(), &own).unwrap().is_none());
    drop(child.stdin.take());
    child.wait().unwrap();
}

/// A real perl whose main thread waits in `Deep::Work::pause`, called from
/// an anonymous sub that `List::Util::first` calls back (a MULTICALL), from
/// `main::outer`, from a sort block, from the main program: its frames are
/// named by package and sub with file and line, and the frames that began
/// a call of the run loop are marked; another thread's id reads none.
#[test]
fn a_live_perls_frames_are_named_with_their_lines() {
    let script = "\
use List::Util qw(first);
package Deep::Work;
sub pause {
    $| = 1; print qq(ready\\n);
    <STDIN>;
    return 1;
}
package main;
sub outer {
    my $f = sub { Deep::Work::pause() };
    return first { $f->() } 1;
}
my @s = sort { outer(); $a <=> $b } 2, 1;
";
    let (mut child, pid) = perl(script);
    let maps = ProcessMaps::read(pid).unwrap();
    let mut process = Process::find(pid, &maps).unwrap().expect("perl runs Perl");
    let mut now = process.record_now(pid);
    for _ in 0..200 {
        // Once it printed, it is on its way to `<STDIN>`, line 5.
        if process
            .name(&now)
            .is_ok_and(|f| f.first().is_some_and(|f| f.line == 5))
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        now = process.record_now(pid);
    }
    assert_eq!(now.status, Status::Read);
    let frames = process.name(&now).unwrap();
    let got: Vec<_> = (frames.iter())
        .map(|f| (f.name.to_string(), f.line, f.entry))
        .collect();
    let want = [
        ("Deep::Work::pause", 5, false),
        ("main::__ANON__", 10, false),
        ("main::__ANON__", 11, true),
        ("main::outer", 11, false),
        // The sort block, in the main program.
        ("main::RUNTIME", 13, true),
        ("main::RUNTIME", 13, true),
    ];
    let want: Vec<_> = (want.iter())
        .map(|&(n, l, e)| (n.to_string(), l, e))
        .collect();
    assert_eq!(got, want, "{frames:#?}");
    assert!(frames.iter().all(|f| &*f.file == "-e"), "{frames:#?}");
    assert_eq!(frames[0].first_line, 4);
    // The same CVs again: named from the cache.
    let held = process.cvs.held();
    assert_eq!(process.name(&now).unwrap().len(), 6);
    assert_eq!(process.cvs.held(), held);
    // A thread not the main one's, and a process gone.
    assert_eq!(process.record_now(pid + 1).status, Status::NoThread);
    drop(child.stdin.take());
    child.wait().unwrap();
    assert_eq!(process.record_now(pid).status, Status::Fault);
}
