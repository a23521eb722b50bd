//! Synthetic sample rings in profd's own record layout and the ingest path
//! they are fed through (ring bytes → parse → demultiplex → the session's
//! stack table), shared by the benchmarks and the allocation test; a real
//! user stack of this process, captured as the kernel would copy it; and
//! the CPU-time measurement the single-threaded benchmarks use.
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use perf_event_open_sys::bindings as sys;
use profd::internals::maps::ProcessMaps;
use profd::internals::perf::record::{
    self, is_context_marker, Layout, CONTEXT_KERNEL, CONTEXT_USER,
};
use profd::internals::perf::{walk_ring, Counts, Stacks, SAMPLE_TYPE, USER_REGS};
use profd::internals::sampler::{
    BatchPool, Children, Demux, Drained, RouteTo, Subscriber, Targets,
};
use profd::internals::session::Ingest;

/// Criterion measurement: the CPU time of the benchmark's thread
/// (CLOCK_THREAD_CPUTIME_ID) instead of wall-clock time, so that other
/// work on a shared machine, which takes the CPU away from the benchmark
/// now and then, is not counted as its time. Only for code that runs
/// entirely on the calling thread.
pub struct ThreadCpu;

fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }

    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }

    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, ns: &u64) -> f64 {
        *ns as f64
    }

    /// Nanoseconds, shown as wall-clock times are.
    fn formatter(&self) -> &dyn ValueFormatter {
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

/// Bytes one drain reads: the rings wake profd at a quarter full.
pub const FP_DRAIN_BYTES: usize = profd::internals::sampler::RING_PAGES * 4096 / 4;
/// The same with stack copies (their rings are larger).
pub const COPY_DRAIN_BYTES: usize = profd::internals::sampler::STACK_RING_PAGES * 4096 / 4;

/// The session's target in every synthetic ring: this process, so that
/// thread names and mappings are real.
pub fn target() -> u32 {
    std::process::id()
}

/// Processes on the ring that no session targets.
const OTHERS: [u32; 3] = [4_000_001, 4_000_002, 4_000_003];
/// Unique stacks per process (each also varies by thread).
const STACKS: usize = 64;
/// Threads of each process.
const THREADS: u32 = 4;
/// Start of the made-up code of the synthetic stacks, and of kernel text.
const TEXT: u64 = 0x5555_5555_4000;
const KTEXT: u64 = 0xffff_ffff_8100_0000;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The records of one drain, as the ring holds them.
pub struct Ring {
    pub bytes: Vec<u8>,
    pub layout: Layout,
    /// Samples on the ring, and those of the session's target.
    pub samples: u64,
    pub routed: u64,
}

/// A real user stack of this process: the registers at a point in
/// [`capture`] and the bytes above the stack pointer.
#[derive(Clone)]
pub struct Captured {
    pub regs: [u64; 3],
    pub stack: Vec<u8>,
}

/// The registers at a point in [`profd::internals::sys::own_stack`] and `bytes` of
/// the stack above them (fewer where the stack ends), as a
/// PERF_SAMPLE_STACK_USER sample of this thread holds them.
pub fn capture(bytes: usize) -> Captured {
    let (regs, stack) = profd::internals::sys::own_stack(bytes);
    Captured { regs, stack }
}

struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_ne_bytes());
    }

    fn u32s(&mut self, a: u32, b: u32) {
        self.bytes.extend_from_slice(&a.to_ne_bytes());
        self.bytes.extend_from_slice(&b.to_ne_bytes());
    }

    /// A record: header, then what `body` writes.
    fn record(&mut self, kind: u32, misc: u16, body: impl FnOnce(&mut Writer)) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
        self.bytes.extend_from_slice(&misc.to_ne_bytes());
        self.bytes.extend_from_slice(&0u16.to_ne_bytes());
        body(self);
        let len = u16::try_from(self.bytes.len() - start).expect("a record fits a u16");
        self.bytes[start + 6..start + 8].copy_from_slice(&len.to_ne_bytes());
    }

    /// The sample_id_all trailer of SAMPLE_TYPE: pid/tid, time, cpu, identifier.
    fn trailer(&mut self, pid: u32, tid: u32) {
        self.u32s(pid, tid);
        self.u64(1);
        self.u32s(0, 0);
        self.u64(7);
    }

    /// A name padded with NULs to whole u64s.
    fn name(&mut self, name: &str) {
        self.bytes.extend_from_slice(name.as_bytes());
        let pad = 8 - name.len() % 8;
        self.bytes.extend(std::iter::repeat_n(0, pad));
    }

    /// The fields every sample starts with, up to the callchain.
    fn sample_head(&mut self, pid: u32, tid: u32, chain: &[u64]) {
        self.u64(7); // identifier
        let ip = chain.iter().copied().find(|&a| !is_context_marker(a));
        self.u64(ip.unwrap_or(0));
        self.u32s(pid, tid);
        self.u64(1); // time
        self.u32s(0, 0); // cpu, res
        self.u64(1_000_000); // period
        self.u64(chain.len() as u64);
        for &a in chain {
            self.u64(a);
        }
    }

    fn fp_sample(&mut self, pid: u32, tid: u32, chain: &[u64]) {
        self.record(sys::PERF_RECORD_SAMPLE, 0, |w| {
            w.sample_head(pid, tid, chain)
        });
    }

    fn copy_sample(&mut self, pid: u32, tid: u32, chain: &[u64], copy: &Captured, size: usize) {
        self.record(sys::PERF_RECORD_SAMPLE, 0, |w| {
            w.sample_head(pid, tid, chain);
            let [ip, sp, bp] = copy.regs;
            w.u64(2); // PERF_SAMPLE_REGS_ABI_64
            for r in [bp, sp, ip] {
                w.u64(r); // in ascending register number
            }
            w.u64(size as u64);
            let valid = copy.stack.len().min(size);
            w.bytes.extend_from_slice(&copy.stack[..valid]);
            w.bytes.extend(std::iter::repeat_n(0, size - valid));
            w.u64(valid as u64);
        });
    }

    fn comm(&mut self, pid: u32, tid: u32, name: &str) {
        self.record(sys::PERF_RECORD_COMM, 0, |w| {
            w.u32s(pid, tid);
            w.name(name);
            w.trailer(pid, tid);
        });
    }

    fn mmap2(&mut self, pid: u32, addr: u64, path: &str) {
        self.record(sys::PERF_RECORD_MMAP2, 0, |w| {
            w.u32s(pid, pid);
            w.u64(addr);
            w.u64(0x1000);
            w.u64(0);
            w.u32s(8, 1);
            w.u64(1234);
            w.u64(0);
            w.u32s(5, 2); // prot, flags
            w.name(path);
            w.trailer(pid, pid);
        });
    }
}

/// The unique stacks of one process: call paths `frames` deep (innermost
/// first) through a small program, a fifth of them entering the kernel.
fn stack_set(rng: &mut Rng, process: u64, frames: usize) -> Vec<Vec<u64>> {
    let base = TEXT + process * 0x10_0000;
    (0..STACKS)
        .map(|_| {
            let mut chain = Vec::with_capacity(frames + 2);
            let kernel = if rng.below(5) == 0 { frames.min(4) } else { 0 };
            if kernel > 0 {
                chain.push(CONTEXT_KERNEL);
                chain.extend((0..kernel).map(|_| KTEXT + rng.below(4096) * 0x40));
            }
            chain.push(CONTEXT_USER);
            // Outer frames are shared (main, a dispatcher, ...): the leaf
            // end varies most.
            let user = frames - kernel;
            let mut path: Vec<u64> = (0..user)
                .map(|depth| {
                    let choices = 1 + (user - depth) as u64 / 4;
                    base + (depth as u64 * 16 + rng.below(choices)) * 0x100 + 0x21
                })
                .collect();
            path.reverse();
            chain.extend(path);
            chain
        })
        .collect()
}

/// A frame-pointer ring of `bytes`: samples with `frames`-deep callchains
/// of the target (70 %) and of three other processes, the same few stacks
/// again and again (skewed towards the first ones), and now and then a
/// COMM and an MMAP2 of another process.
pub fn frame_pointer_ring(frames: usize, bytes: usize) -> Ring {
    let layout = Layout::new(SAMPLE_TYPE, true, 0).expect("profd's layout");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ frames as u64);
    let pids = [target(), OTHERS[0], OTHERS[1], OTHERS[2]];
    let sets: Vec<_> = (0..pids.len())
        .map(|p| stack_set(&mut rng, p as u64, frames))
        .collect();
    fill(bytes, layout, &mut rng, |w, rng, p| {
        let set = &sets[p];
        let i = (rng.below(STACKS as u64) * rng.below(STACKS as u64)) as usize / STACKS;
        let tid = pids[p] + rng.below(u64::from(THREADS)) as u32;
        w.fp_sample(pids[p], tid, &set[i]);
    })
}

/// A stack-copy ring of `bytes`: samples carrying `size` bytes of the
/// captured stack `copy` (the target's own, so it unwinds through its real
/// code) and a short kernel callchain, mixed as in [`frame_pointer_ring`].
pub fn stack_copy_ring(copy: &Captured, size: usize, bytes: usize) -> Ring {
    let sample_type =
        SAMPLE_TYPE | (sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER) as u64;
    let layout = Layout::new(sample_type, true, USER_REGS).expect("profd's layout");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ size as u64);
    let pids = [target(), OTHERS[0], OTHERS[1], OTHERS[2]];
    let kernel: Vec<Vec<u64>> = (0..8)
        .map(|k| {
            let mut chain = vec![CONTEXT_KERNEL];
            chain.extend((0..k % 4).map(|_| KTEXT + rng.below(4096) * 0x40));
            chain
        })
        .collect();
    fill(bytes, layout, &mut rng, |w, rng, p| {
        let chain = &kernel[rng.below(kernel.len() as u64) as usize];
        let tid = pids[p] + rng.below(u64::from(THREADS)) as u32;
        w.copy_sample(pids[p], tid, chain, copy, size);
    })
}

/// Records up to `bytes`: samples written by `sample(writer, rng, process)`
/// (process 0 is the target) and a COMM and MMAP2 of another process every
/// 64 samples.
fn fill(
    bytes: usize,
    layout: Layout,
    rng: &mut Rng,
    mut sample: impl FnMut(&mut Writer, &mut Rng, usize),
) -> Ring {
    let mut w = Writer {
        bytes: Vec::with_capacity(bytes),
    };
    let (mut samples, mut routed) = (0, 0);
    loop {
        let before = w.bytes.len();
        let p = match rng.below(10) {
            0..7 => 0,
            n => n as usize - 6,
        };
        sample(&mut w, rng, p);
        if samples % 64 == 63 {
            let other = OTHERS[samples as usize % OTHERS.len()];
            w.comm(other, other + 1, "worker");
            w.mmap2(other, TEXT + samples * 0x1000, "/usr/lib/libother.so");
        }
        if w.bytes.len() > bytes {
            w.bytes.truncate(before);
            break;
        }
        samples += 1;
        routed += u64::from(p == 0);
    }
    Ring {
        bytes: w.bytes,
        layout,
        samples,
        routed,
    }
}

/// profd's ingest path for one ring and one session of [`target`]: the
/// sampler's per-ring demultiplexer and the session's counts.
pub struct Pipeline {
    demux: Demux,
    targets: Targets,
    ingest: Ingest,
    scratch: Vec<u8>,
}

impl Pipeline {
    /// With `stack_copy`, the session knows the target's mappings (to
    /// unwind); without, it needs none.
    pub fn new(stack_copy: bool) -> Pipeline {
        let (maps, stacks) = if stack_copy {
            let maps = ProcessMaps::read(target()).expect("own /proc/self/maps");
            (maps, Stacks::Copied)
        } else {
            (ProcessMaps::default(), Stacks::FramePointers)
        };
        let demux = Demux::new(stacks, BatchPool::default());
        let tops = demux.tops();
        Pipeline {
            demux,
            targets: Targets::new([RouteTo {
                session: Subscriber::Session(1),
                pid: target(),
                children: Children::Ignored,
            }]),
            ingest: Ingest::new(target(), "bench".into(), maps, stacks, 1 << 20, None, tops),
            scratch: Vec::new(),
        }
    }

    /// One drain of `ring`, as the sampler does it (its task records first,
    /// then all); returns what it saw.
    pub fn drain(&mut self, ring: &Ring) -> Drained {
        let ingest = &mut self.ingest;
        let mut drain = self.demux.begin(&self.targets, |_, batch| {
            ingest.apply(batch, |_| false).expect("no exec in the ring");
        });
        let head = ring.bytes.len() as u64;
        walk_ring(
            &ring.bytes,
            0,
            head,
            &mut self.scratch,
            |kind, misc, body| {
                if record::is_task(kind) {
                    drain.task(record::parse(&ring.layout, kind, misc, body));
                }
            },
        );
        drain.resolve();
        walk_ring(
            &ring.bytes,
            0,
            head,
            &mut self.scratch,
            |kind, misc, body| drain.record(record::parse(&ring.layout, kind, misc, body)),
        );
        let lost = drain.lost_records();
        drain.finish(Counts {
            lost,
            ..Counts::default()
        })
    }

    /// The session's counts.
    pub fn ingest(&self) -> &Ingest {
        &self.ingest
    }
}
