//! The stack-top feedback: how far up each thread's stack the sessions'
//! unwinding reads, which bounds the stack copies the rings' drains take.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How far up each thread's stack its unwinding reads, learned from its
/// complete walks: the copy of a sample's stack is cut there (plus
/// [`StackTops::MARGIN`]), since every walk of a thread ends at the same
/// outermost frame. A 16 KiB copy of a stack whose walks read 1 KiB is then
/// 1.5 KiB taken out of the ring. Shared by a group's drains, which add
/// each routed thread (unknown: nothing cut) and drop it when it exits or
/// execs, and the sessions routed to the group (each given it when it
/// subscribes), which raise a known thread's top after each complete walk and drop it after a walk that stops short
/// (a thread that moved to another stack then has its next copies whole).
/// A thread's top is the highest any of its complete walks reached: for a
/// thread that runs on several stacks (coroutines), every stack below it is
/// then bounded by it, and a stack above it is not cut at all.
#[derive(Clone, Debug, Default)]
pub struct StackTops(Arc<Mutex<HashMap<u32, u64>>>);

impl StackTops {
    /// Bytes kept above a thread's top.
    pub const MARGIN: u64 = 512;
    /// Threads known at most; beyond, all are forgotten.
    const MAX_THREADS: usize = 1 << 16;

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, u64>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The part of thread `tid`'s stack copy `stack`, taken from `sp`,
    /// that its walks read.
    pub fn cut<'s>(&self, tid: u32, sp: u64, stack: &'s [u8]) -> &'s [u8] {
        let mut tops = self.lock();
        if tops.len() >= Self::MAX_THREADS && !tops.contains_key(&tid) {
            tops.clear();
        }
        match *tops.entry(tid).or_insert(0) {
            top if top > sp => {
                let keep = (top - sp).saturating_add(Self::MARGIN);
                &stack[..stack.len().min(usize::try_from(keep).unwrap_or(usize::MAX))]
            }
            _ => stack,
        }
    }

    /// A walk of `tid` read its stack below `reach` and ended at the
    /// outermost frame.
    pub fn learn(&self, tid: u32, reach: u64) {
        if let Some(top) = self.lock().get_mut(&tid) {
            *top = (*top).max(reach);
        }
    }

    /// `tid` exited, exec'd, or a walk of it stopped short.
    pub fn forget(&self, tid: u32) {
        self.lock().remove(&tid);
    }
}
