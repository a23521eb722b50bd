//! Unit tests of `ingest`: batches counted into a session.
use super::*;

/// A frame-pointer session of `target`, of at most 100 stacks.
fn of(target: u32, recheck: Option<Recheck>) -> Ingest {
    Ingest::new(
        target,
        "t".into(),
        ProcessMaps::default(),
        Stacks::FramePointers,
        100,
        recheck,
        None,
    )
}

fn batch(samples: &[(u32, u64)]) -> Batch {
    let mut batch = Batch {
        seen: samples.len() as u64,
        ..Batch::default()
    };
    for &(pid, ip) in samples {
        batch.push(pid, pid, [ip].into_iter(), None);
    }
    batch
}

#[test]
fn samples_drained_after_their_process_exited_still_count_for_it() {
    let (target, child) = (std::process::id(), u32::MAX - 1);
    let mut ingest = of(target, None);
    // One CPU's ring: the fork, a sample of each, the child's exit.
    let mut first = batch(&[(target, 0x100), (child, 0x200)]);
    first.forks.push((child, target, 0));
    first.exits.push((child, 0));
    ingest.apply(first, |_| false).unwrap();
    // The other CPU's ring, drained later: the child's last samples.
    ingest
        .apply(batch(&[(child, 0x200), (child, 0x300)]), |_| false)
        .unwrap();
    let counts: Vec<_> = ingest
        .processes
        .iter()
        .map(|p| (p.pid, p.ppid, p.samples, p.exited))
        .collect();
    assert_eq!(counts, [(target, 0, 1, false), (child, target, 3, true)]);
    assert_eq!(ingest.totals.attributed, 4);
    assert_eq!(ingest.totals.discarded, 0);
}

/// Held (memory pressure), a session keeps the stacks it has and counts
/// the samples of new ones under the stack limit; let go, it adds them
/// again.
#[test]
fn held_stacks_count_new_ones_under_the_limit() {
    let target = std::process::id();
    let mut ingest = of(target, None);
    ingest.set_max_stacks(usize::MAX);
    let many: Vec<(u32, u64)> = (0..CAPPED_STACKS as u64 + 1)
        .map(|i| (target, 0x1000 + i))
        .collect();
    ingest.apply(batch(&many), |_| false).unwrap();
    let kept = ingest.stacks.len();
    assert_eq!(kept, CAPPED_STACKS + 1);
    ingest.hold_stacks(true);
    let held = batch(&[(target, 0x1000), (target, 0x200), (target, 0x300)]);
    ingest.apply(held, |_| false).unwrap();
    assert_eq!(ingest.totals.overflowed, 2, "0x200 and 0x300 are new");
    assert_eq!(ingest.stacks.len(), kept + 1, "and the limit's marker");
    ingest.hold_stacks(false);
    ingest.apply(batch(&[(target, 0x200)]), |_| false).unwrap();
    assert_eq!(ingest.totals.overflowed, 2);
    assert_eq!(ingest.stacks.len(), kept + 2);
    // A session held with few stacks still takes them up to the cap of
    // a continuous window.
    let mut few = of(target, None);
    few.hold_stacks(true);
    few.apply(batch(&[(target, 0x100), (target, 0x200)]), |_| false)
        .unwrap();
    assert_eq!(few.totals.overflowed, 0);
}

/// A process gone before its exec could be checked does not fail the
/// session: its samples from then on, and its children's, count as
/// unchecked, not in the profile; a refused exec still fails it.
#[test]
fn samples_of_an_exec_that_could_not_be_checked_count_apart() {
    let (target, child, grandchild) = (std::process::id(), u32::MAX - 1, u32::MAX - 2);
    let recheck: Recheck = std::sync::Arc::new(move |pid| match pid {
        p if p == child => Check::Gone,
        p if p == target => Check::Allowed,
        _ => Check::Denied(Denied::NotDumpable { who: "no".into() }),
    });
    let mut ingest = of(target, Some(recheck));
    let mut first = batch(&[(target, 0x100), (child, 0x200)]);
    first.forks.push((child, target, 0));
    ingest.apply(first, |_| false).unwrap();
    // The child exec'd, and had exited when the batch was counted.
    let mut after = batch(&[(child, 0x300), (target, 0x100), (grandchild, 0x400)]);
    after.exec = Some((child, "true".into()));
    after.forks.push((grandchild, child, 0));
    ingest.apply(after, |_| false).unwrap();
    let t = ingest.totals;
    assert_eq!((t.attributed, t.unchecked, t.discarded), (3, 2, 0));
    // The target's own exec is checked and allowed.
    let mut own = batch(&[(target, 0x100)]);
    own.exec = Some((target, "t2".into()));
    ingest.apply(own, |_| false).unwrap();
    assert_eq!(ingest.totals.attributed, 4);
    // A refused exec fails the session.
    let mut refused = batch(&[(7, 0x100)]);
    refused.exec = Some((7, "su".into()));
    let err = ingest.apply(refused, |_| false).unwrap_err();
    let err = err.to_string();
    assert!(err.contains("exec of su: no is not dumpable"), "{err}");
}

/// Samples of a process waiting to be set up (the new-process budget
/// was spent) are attributed to it, and counted as waiting.
#[test]
fn samples_of_a_process_not_set_up_yet_count_for_it() {
    use super::super::setup_budget::Budget;
    let me = std::process::id();
    let budget: &'static Budget = Box::leak(Box::new(Budget::new(std::time::Duration::ZERO)));
    let mut ingest = Ingest::every(Stacks::Copied, 100, None);
    ingest.spaces.set_budget(budget);
    ingest
        .apply(batch(&[(me, 0x100), (me, 0x200), (me, 0x100)]), |_| false)
        .unwrap();
    assert_eq!(ingest.totals.attributed, 3);
    assert_eq!(ingest.totals.discarded, 0);
    let counts: Vec<_> = ingest
        .processes
        .iter()
        .map(|p| (p.pid, p.samples))
        .collect();
    assert_eq!(counts, [(me, 3)]);
    let c = budget.counters();
    assert_eq!((c.processes, c.deferred, c.deferred_samples), (0, 1, 3));
    // Once the budget allows, the next batch sets it up.
    budget.set(std::time::Duration::from_secs(1000));
    ingest.apply(batch(&[(me, 0x100)]), |_| false).unwrap();
    let space = ingest.spaces.of(me);
    assert!(ingest.spaces.is_set_up(space));
    assert_eq!(budget.counters().deferred_samples, 3);
}

#[test]
fn walks_tell_the_sampler_how_much_of_each_threads_stack_to_copy() {
    let target = std::process::id();
    let tops = StackTops::default();
    let maps = ProcessMaps::default();
    let mut ingest = Ingest::new(
        target,
        "t".into(),
        maps,
        Stacks::Copied,
        100,
        None,
        Some(tops.clone()),
    );
    let (sp, whole) = (0x7fff_0000_1000u64, [0u8; 64]);
    // The sampler routed threads 10 and 11 (unknown yet: copies whole).
    assert_eq!(tops.cut(10, sp, &whole).len(), 64);
    assert_eq!(tops.cut(11, sp, &whole).len(), 64);
    // Frame pointers (no module known): thread 10's frame at sp + 8
    // holds a zero caller bp and a return address, its walk reads up to
    // sp + 0x18; thread 11's bp chain leaves the copy: its walk stops
    // short.
    let mut ends = [0u8; 64];
    ends[16..24].copy_from_slice(&0x5555u64.to_ne_bytes());
    let mut leaves = ends;
    leaves[8..16].copy_from_slice(&(sp + 0x1000).to_ne_bytes());
    let mut batch = Batch::default();
    batch.push(
        target,
        10,
        std::iter::empty(),
        Some(([0x4444, sp, sp + 8], &ends)),
    );
    batch.push(
        target,
        11,
        std::iter::empty(),
        Some(([0x4444, sp, sp + 8], &leaves)),
    );
    ingest.apply(batch, |_| false).unwrap();
    assert_eq!(ingest.totals.truncated, 1);
    let margin = StackTops::MARGIN as usize;
    assert_eq!(tops.cut(10, sp, &[0u8; 4096]).len(), 0x18 + margin);
    assert_eq!(tops.cut(11, sp, &[0u8; 4096]).len(), 4096, "forgotten");
}

/// A batch holds its forks and mappings ring by ring, not in time order: a
/// child's space has the mappings its parent made before the fork (such as
/// those of a program it had just exec'd), and not those made after.
#[test]
fn a_child_starts_with_the_mappings_its_parent_made_before_the_fork() {
    use crate::process::maps::Backing;
    let (target, child) = (std::process::id(), u32::MAX - 1);
    let mut ingest = of(target, None);
    let mapping = |start| Mapping::new(start, start + 0x1000, 0, Backing::Special("[vdso]".into()));
    let mut b = batch(&[(child, 0x10_0800)]);
    // The fork's CPU's ring was read first, then the parent's mappings'.
    b.forks.push((child, target, 20));
    b.mappings.push((target, mapping(0x20_0000), 30));
    b.mappings.push((target, mapping(0x10_0000), 10));
    ingest.apply(b, |_| false).unwrap();
    let (parent, space) = (ingest.spaces.of(target), ingest.spaces.of(child));
    assert_ne!(space, parent, "the child has a space of its own");
    let maps = ingest.spaces.maps(space);
    assert!(maps.find(0x10_0800).is_some(), "mapped before the fork");
    assert!(maps.find(0x20_0800).is_none(), "mapped after the fork");
    assert!(ingest.spaces.maps(parent).find(0x20_0800).is_some());
}
