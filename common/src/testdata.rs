//! Hand-built resolved profiles with known figures, shared by the unit tests
//! of views and exports (test builds only).
use crate::api::Mode;
use crate::model::{FrameRef, FunctionInfo, ResolvedProfile, ResolvedStack};

pub const MAIN: u32 = 0;
pub const A: u32 = 1;
pub const B: u32 = 2;
pub const C: u32 = 3;
pub const R: u32 = 4;
pub const INL: u32 = 5;
/// A function that never appears on a stack.
pub const UNUSED: u32 = 6;

fn f(name: &str, module: &str, file: &str, inlined: bool) -> FunctionInfo {
    FunctionInfo {
        name: name.into(),
        module: module.into(),
        file: file.into(),
        inlined,
        origin: None,
    }
}

fn fr(function: u32, line: u32, address: u64) -> FrameRef {
    FrameRef {
        function,
        line,
        address,
    }
}

fn stack(tid: u32, frames: Vec<FrameRef>, count: u64) -> ResolvedStack {
    ResolvedStack { tid, frames, count }
}

/// Call graph main→a→c, main→b→c, main→a, main→r→r→r (recursion), and
/// `inl` inlined into b (same address); 12 samples on threads 10 and 11:
///
/// ```text
/// tid 10: c a main ×3, c b main ×2, a main ×1
/// tid 11: r r r main ×4, inl[inlined] b main ×2
/// ```
pub fn known() -> ResolvedProfile {
    ResolvedProfile {
        functions: vec![
            f("main", "prog", "main.c", false),
            f("a", "prog", "a.c", false),
            f("b", "prog", "b.c", false),
            f("c", "libc.so.6", "c.c", false),
            f("r", "prog", "r.c", false),
            f("inl", "prog", "inl.h", true),
            f("unused", "prog", "", false),
        ],
        stacks: vec![
            stack(
                10,
                vec![fr(C, 30, 0x7f00), fr(A, 11, 0x110), fr(MAIN, 5, 0x50)],
                3,
            ),
            stack(
                10,
                vec![fr(C, 31, 0x7f01), fr(B, 20, 0x200), fr(MAIN, 6, 0x51)],
                2,
            ),
            stack(10, vec![fr(A, 12, 0x111), fr(MAIN, 5, 0x50)], 1),
            stack(
                11,
                vec![
                    fr(R, 40, 0x400),
                    fr(R, 41, 0x401),
                    fr(R, 41, 0x401),
                    fr(MAIN, 7, 0x52),
                ],
                4,
            ),
            stack(
                11,
                vec![fr(INL, 50, 0x210), fr(B, 21, 0x210), fr(MAIN, 6, 0x51)],
                2,
            ),
        ],
        threads: [(10, "main".to_string()), (11, "worker".to_string())].into(),
        thread_pids: [(10, 1234), (11, 1235)].into(),
        attributed: 12,
        frequency_hz: 1000,
        duration_s: 2.5,
        pid: 1234,
        comm: "prog".into(),
        mode: Mode::Cpu,
    }
}

/// Mutual recursion on one thread: main → ping → pong → ping → pong, with
/// function ids main 0, ping 1, pong 2; 10 samples:
///
/// ```text
/// pong ping pong ping main ×6, ping pong ping main ×3, pong ping main ×1
/// ```
pub fn mutual() -> ResolvedProfile {
    let (main, ping, pong) = (0, 1, 2);
    let frames = |ids: &[u32]| -> Vec<FrameRef> {
        ids.iter()
            .map(|&id| fr(id, 10 + id, 0x100 * u64::from(id + 1)))
            .collect()
    };
    ResolvedProfile {
        functions: vec![
            f("main", "prog", "main.c", false),
            f("ping", "prog", "ping.c", false),
            f("pong", "prog", "pong.c", false),
        ],
        stacks: vec![
            stack(10, frames(&[pong, ping, pong, ping, main]), 6),
            stack(10, frames(&[ping, pong, ping, main]), 3),
            stack(10, frames(&[pong, ping, main]), 1),
        ],
        threads: [(10, "main".to_string())].into(),
        thread_pids: [(10, 1234)].into(),
        attributed: 10,
        frequency_hz: 1000,
        duration_s: 1.0,
        pid: 1234,
        comm: "prog".into(),
        mode: Mode::Cpu,
    }
}

/// A waiting frame's function id in [`off_cpu`].
pub const BLOCKED: u32 = 7;

/// [`known`] as an off-CPU profile: the same stacks under an outermost
/// `[off-cpu: blocked]` frame, each count in milliseconds (12 ms in all).
pub fn off_cpu() -> ResolvedProfile {
    let mut p = known();
    p.mode = Mode::OffCpu;
    p.functions
        .push(f("[off-cpu: blocked]", "[off-cpu]", "", false));
    for s in &mut p.stacks {
        s.frames.push(fr(BLOCKED, 0, 0));
        s.count *= 1_000_000;
    }
    p.attributed *= 1_000_000;
    p
}
