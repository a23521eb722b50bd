//! Unit tests of `spaces`: tags, spaces opened, set up, compacted and let
//! go of, rule caches within their budget.
use super::*;

#[test]
fn tags_keep_kernel_and_space_zero_addresses() {
    assert_eq!(tag(0, 0x401000), 0x401000);
    assert_eq!(tag(3, 0xffff_ffff_8100_0000), 0xffff_ffff_8100_0000);
    assert_eq!(tag(3, BAD_USER_FRAME), BAD_USER_FRAME);
    let t = tag(3, 0x7fff_1234_5678);
    assert_ne!(t, 0x7fff_1234_5678);
    assert!(!is_kernel(t));
    assert_eq!(untag(t), (3, 0x7fff_1234_5678));
    assert_eq!(untag(0x401000), (0, 0x401000));
    assert_eq!(untag(0xffff_ffff_8100_0000), (0, 0xffff_ffff_8100_0000));
}

/// Every process gets a space when first seen; compacting drops the
/// spaces of processes gone and keeps the others with their mappings.
#[test]
fn spaces_of_every_process_open_when_seen_and_compact_when_gone() {
    let me = std::process::id();
    let mut spaces = Spaces::every(Stacks::Copied);
    spaces.set_budget(plenty());
    assert_eq!(spaces.open(0), 0, "the idle task has none");
    let mine = spaces.open(me);
    assert_ne!(mine, 0);
    assert!(!spaces.maps(mine).is_empty(), "read from /proc");
    assert_eq!(spaces.open(me), mine, "opened once");
    let (child, other) = (u32::MAX - 7, u32::MAX - 8);
    spaces.fork(child, me);
    spaces.fork(other, me);
    spaces.exit(child);
    for _ in 0..EXIT_GRACE + 1 {
        spaces.next_batch();
    }
    assert_eq!(spaces.len(), 4);
    spaces.compact();
    assert_eq!(spaces.len(), 3, "the exited child's space is dropped");
    assert_eq!(spaces.of(child), 0);
    let (m, o) = (spaces.of(me), spaces.of(other));
    assert!(m != 0 && o != 0 && m != o);
    assert_eq!(spaces.maps(m).len(), spaces.maps(o).len());
    assert!(!spaces.is_set_up(o), "set up when sampled");
    assert_eq!(spaces.open(other), o);
    assert!(spaces.is_set_up(o));
    assert!(!spaces.list[o].unwinder.is_empty());
}

/// A budget no test runs out of.
fn plenty() -> &'static Budget {
    Box::leak(Box::new(Budget::new(std::time::Duration::from_secs(1000))))
}

/// With every process, a process is set up (maps read, files opened)
/// only when a sample of it comes, and a mapping's unwind tables are
/// read only when a walk reaches its code.
#[test]
fn every_process_is_set_up_when_sampled_and_read_when_walked() {
    let me = std::process::id();
    let budget = plenty();
    let mut spaces = Spaces::every(Stacks::Copied);
    spaces.set_budget(budget);
    let mine = ProcessMaps::read(me).unwrap();
    // Forks of, mappings of and execs of processes never sampled.
    let (child, other) = (u32::MAX - 7, u32::MAX - 8);
    spaces.fork(child, me);
    spaces.insert(me, mine.iter().cloned());
    spaces.exec(other);
    spaces.insert(other, mine.iter().cloned());
    spaces.fork(u32::MAX - 9, other);
    let c = budget.counters();
    assert_eq!((c.processes, c.deferred), (0, 0), "nothing set up: {c:?}");
    assert!(spaces.list[1..]
        .iter()
        .all(|s| !s.set_up && s.unwinder.is_empty()));
    assert_eq!(spaces.of(me), 0, "no space for a process never sampled");
    // Sampled: set up, its mappings known to its unwinder, none read.
    let i = spaces.open(me);
    assert!(spaces.is_set_up(i) && !spaces.maps(i).is_empty());
    assert_eq!(budget.counters().processes, 1);
    assert!(budget.counters().seconds > 0.0);
    let u = spaces.unwinder(i);
    assert!(!u.is_empty());
    assert_eq!(u.tables_held(), 0, "no walk, no unwind tables read");
    // A walk from an address in libc reads libc's alone.
    let libc = spaces
        .maps(i)
        .iter()
        .find(|m| m.module().starts_with("libc.so"))
        .expect("libc is mapped")
        .start;
    let (sp, stack) = (0x7ffd_0000_0000, [0u8; 64]);
    let u = spaces.unwinder(i);
    u.unwind(libc + 0x10, sp, 0, &stack, &mut Vec::new());
    assert_eq!(u.tables_held(), 1);
    // The exec'd process, sampled: set up from its MMAP2 records.
    let o = spaces.open(other);
    assert!(spaces.is_set_up(o));
    assert_eq!(spaces.maps(o).len(), mine.len());
    assert_eq!(budget.counters().processes, 2);
}

/// Past the budget, a sampled process waits (counted) and is set up at
/// a later batch once the budget allows.
#[test]
fn past_the_budget_a_process_is_set_up_at_a_later_batch() {
    let me = std::process::id();
    let budget: &'static Budget = Box::leak(Box::new(Budget::new(std::time::Duration::ZERO)));
    let mut spaces = Spaces::every(Stacks::Copied);
    spaces.set_budget(budget);
    let i = spaces.open(me);
    assert_ne!(i, 0);
    assert!(!spaces.is_set_up(i) && spaces.maps(i).is_empty());
    assert_eq!(spaces.open(me), i, "one space");
    spaces.count_waiting(3);
    let c = budget.counters();
    assert_eq!((c.processes, c.deferred, c.deferred_samples), (0, 1, 3));
    spaces.next_batch();
    assert!(!spaces.is_set_up(i), "still no budget");
    budget.set(std::time::Duration::from_secs(1000));
    spaces.next_batch();
    assert!(spaces.is_set_up(i) && !spaces.maps(i).is_empty());
    let c = budget.counters();
    assert_eq!((c.processes, c.deferred), (1, 1));
}

/// With every process, an exited process's space lets go of its
/// unwinder after the grace and of its mappings (and files) at the
/// next cut.
#[test]
fn an_exited_process_is_let_go_of_by_the_next_cut() {
    let me = std::process::id();
    let mut spaces = Spaces::every(Stacks::Copied);
    spaces.set_budget(plenty());
    spaces.open(me);
    let child = u32::MAX - 7;
    spaces.fork(child, me);
    let c = spaces.open(child);
    let file = spaces
        .maps(c)
        .iter()
        .find_map(|m| m.file().cloned())
        .unwrap();
    let held = std::sync::Arc::strong_count(&file);
    spaces.exit(child);
    for _ in 0..EXIT_GRACE {
        spaces.next_batch();
    }
    assert!(spaces.list[c].unwinder.is_empty());
    assert_eq!(spaces.release_retired(), vec![c], "let go of at the cut");
    assert!(spaces.maps(c).is_empty());
    assert!(std::sync::Arc::strong_count(&file) < held);
}

/// With more processes walked than rule caches allowed, the oldest
/// caches go, but for those walked since they were last looked at.
#[test]
fn rule_caches_are_kept_within_their_budget() {
    let me = std::process::id();
    let mut spaces = Spaces::new(me, ProcessMaps::read(me).unwrap(), Stacks::Copied);
    spaces.set_budget(plenty());
    let stack = [0u8; 64];
    let walk = |spaces: &mut Spaces, i: usize| {
        let sp = 0x7ffd_0000_0000;
        spaces
            .unwinder(i)
            .unwind(0x1234, sp, sp, &stack, &mut Vec::new());
    };
    let kids: Vec<usize> = (0..3 * MAX_CACHES as u32)
        .map(|k| {
            spaces.fork(u32::MAX - k, me);
            spaces.of(u32::MAX - k)
        })
        .collect();
    let caches = |spaces: &Spaces| {
        spaces
            .list
            .iter()
            .filter(|s| s.unwinder.has_cache())
            .count()
    };
    walk(&mut spaces, 0);
    for (n, &i) in kids.iter().enumerate() {
        walk(&mut spaces, i);
        // The target is walked all along: it keeps its cache.
        if n % 4 == 0 {
            walk(&mut spaces, 0);
        }
        assert!(
            caches(&spaces) <= MAX_CACHES + 1,
            "{} caches",
            caches(&spaces)
        );
    }
    assert!(
        spaces.list[0].unwinder.has_cache(),
        "the busy space keeps its cache"
    );
    assert!(
        !spaces.list[kids[0]].unwinder.has_cache(),
        "the oldest went"
    );
    assert!(spaces.list[*kids.last().unwrap()].unwinder.has_cache());
    assert!(
        caches(&spaces) >= MAX_CACHES / 2,
        "{} caches",
        caches(&spaces)
    );
    // Renumbered spaces keep their place.
    spaces.compact();
    walk(&mut spaces, 1);
    assert!(caches(&spaces) <= MAX_CACHES + 1);
}

#[test]
fn an_exited_process_keeps_only_its_mappings_after_the_grace() {
    let me = std::process::id();
    let mut spaces = Spaces::new(me, ProcessMaps::read(me).unwrap(), Stacks::Copied);
    let child = u32::MAX - 7;
    spaces.next_batch();
    spaces.fork(child, me);
    let space = spaces.of(child);
    assert_ne!(space, 0);
    assert!(!spaces.list[space].unwinder.is_empty());
    spaces.exit(child);
    for _ in 0..EXIT_GRACE - 1 {
        spaces.next_batch();
        assert!(
            !spaces.list[space].unwinder.is_empty(),
            "retired within the grace"
        );
    }
    spaces.next_batch();
    assert!(spaces.list[space].unwinder.is_empty());
    assert_eq!(spaces.list[space].maps.len(), spaces.list[0].maps.len());
    assert!(!spaces.list[0].unwinder.is_empty(), "the target's stays");
}
