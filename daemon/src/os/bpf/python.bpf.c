// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// profd's sample-time reader of CPython frames. Attached to the sampling
// perf events, it runs at each sample, before the kernel writes the sample:
// for a thread of a process profd registered (map `procs`, by thread group
// id), it follows the interpreter's thread states to the sampled thread's,
// then its chain of frames, and copies what names each frame (its code
// object, its last instruction, its owner and entry bytes) into a record
// of the ring buffer `out`, stamped with the thread id and CLOCK_MONOTONIC. The daemon pairs each record with its sample by thread
// and time, and names the frames' code objects itself.
//
// Built with `clang -target bpf`; it needs no kernel headers: the few
// definitions it uses are spelled here.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int s32;
typedef long long s64;

#define SEC(name) __attribute__((section(name), used))

// The kernel's helpers, by their numbers in the BPF ABI.
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_user)(void *dst, u32 size, const void *src) = (void *)112;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, u64 size, u64 flags) = (void *)130;

// The legacy map definition (section "maps").
struct map_def {
    u32 type;
    u32 key_size;
    u32 value_size;
    u32 max_entries;
    u32 map_flags;
};

#define MAP_HASH 1
#define MAP_PERCPU_ARRAY 6
#define MAP_RINGBUF 27

// Field offsets are masked with this, so that the verifier sees every read
// of a field within the buffer the frame was read into; a frame is read
// up to this many bytes.
#define OFFSET_MASK 127
// Frames copied at most; a deeper chain is marked truncated.
#define MAX_FRAMES 128
// Interpreters and threads followed at most to find the sampled thread.
#define MAX_INTERPRETERS 4
#define MAX_THREADS 256

// Where CPython keeps what the walk follows, per process (the daemon's
// `Layout`, and where `_PyRuntime` is).
struct config {
    u64 runtime;           // address of _PyRuntime
    u64 interpreters;      // _PyRuntimeState.interpreters.head
    u64 interp_next;       // PyInterpreterState.next
    u64 interp_threads;    // PyInterpreterState.threads.head
    u64 thread_next;       // PyThreadState.next
    u64 thread_id;         // PyThreadState.native_thread_id, or (with
                           // pthread_tid) .thread_id, a pthread_t
    u64 thread_current;    // PyThreadState.cframe, or .current_frame
    u64 cframe_current;    // _PyCFrame.current_frame; ~0 when none
    u64 frame_previous;    // _PyInterpreterFrame.previous
    u64 frame_code;        // .f_code (3.13: .f_executable)
    u64 frame_instr;       // .prev_instr (3.13: .instr_ptr)
    u64 frame_owner;       // .owner; ~0 when none (before 3.11)
    u64 frame_entry;       // .is_entry (3.11); ~0 when none
    u64 code_identity;     // PyCodeObject.co_filename: it, .co_name,
                           // .co_qualname and .co_linetable follow
                           // (before 3.11: it, .co_name, the table)
    u64 pthread_tid;       // where glibc's struct pthread keeps the
                           // native id; ~0 when thread_id is that id
    u64 frame_bytes;       // bytes of a frame that hold its fields read
};

// What a record keeps of a frame: its code object's address and identity
// (four pointers: the daemon names a code object it knows by them without
// reading it again), its last instruction, and its owner and entry bytes.
struct frame {
    u64 code;
    u64 instr;
    u64 identity[4];
    u8 owner;
    u8 entry;
    u8 pad[6];
};

// What a record says of its read.
#define READ_OK 0
#define READ_NO_THREAD 1
#define READ_FAULT 2
#define READ_TRUNCATED 3

struct record {
    u64 time;
    u32 tid;
    u32 frames;
    u32 status;
    u32 runtime; // 0: CPython; RUNTIME_RUBY; RUNTIME_PERL
    struct frame frame[MAX_FRAMES];
    // Where each frame is read, before its fields are kept: room for an
    // 8-byte field at any masked offset (below).
    u8 raw[OFFSET_MASK + 1 + 8];
};

#define HEADER_BYTES 24

struct map_def SEC("maps") procs = {
    .type = MAP_HASH,
    .key_size = sizeof(u32),
    .value_size = sizeof(struct config),
    .max_entries = 4096,
};

struct map_def SEC("maps") out = {
    .type = MAP_RINGBUF,
    .max_entries = 1 << 20,
};

// A record is built here (too large for the BPF stack), then its used part
// copied out.
struct map_def SEC("maps") scratch = {
    .type = MAP_PERCPU_ARRAY,
    .key_size = sizeof(u32),
    .value_size = sizeof(struct record),
    .max_entries = 1,
};

static __attribute__((always_inline)) int word(u64 *dst, u64 addr) {
    return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr);
}

#include "perl.bpf.h"
#include "ruby.bpf.h"

// The thread state of native thread `tid`, 0 when none has it.
static __attribute__((always_inline)) u64 thread_state(struct config *c, u32 tid, u32 *status) {
    u64 interp = 0;
    if (word(&interp, c->runtime + c->interpreters)) {
        *status = READ_FAULT;
        return 0;
    }
    for (int i = 0; i < MAX_INTERPRETERS && interp; i++) {
        u64 thread = 0;
        if (word(&thread, interp + c->interp_threads)) {
            *status = READ_FAULT;
            return 0;
        }
        for (int j = 0; j < MAX_THREADS && thread; j++) {
            u64 id = 0;
            if (word(&id, thread + c->thread_id)) {
                *status = READ_FAULT;
                return 0;
            }
            if (c->pthread_tid != ~0ULL && word(&id, id + c->pthread_tid)) {
                *status = READ_FAULT;
                return 0;
            }
            if ((u32)id == tid)
                return thread;
            if (word(&thread, thread + c->thread_next)) {
                *status = READ_FAULT;
                return 0;
            }
        }
        if (word(&interp, interp + c->interp_next)) {
            *status = READ_FAULT;
            return 0;
        }
    }
    *status = READ_NO_THREAD;
    return 0;
}

SEC("perf_event")
int python_frames(void *ctx) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32, tid = (u32)id;
    struct config *c = bpf_map_lookup_elem(&procs, &tgid);
    if (!c)
        return ruby_frames(tgid, tid);
    u32 zero = 0;
    struct record *r = bpf_map_lookup_elem(&scratch, &zero);
    if (!r)
        return 1;
    r->time = bpf_ktime_get_ns();
    r->tid = tid;
    r->frames = 0;
    r->status = READ_OK;
    r->runtime = 0;
    u64 frame = 0;
    u64 thread = thread_state(c, tid, &r->status);
    if (thread) {
        if (word(&frame, thread + c->thread_current))
            r->status = READ_FAULT;
        else if (frame && c->cframe_current != ~0ULL && word(&frame, frame + c->cframe_current))
            r->status = READ_FAULT;
    }
    u32 n = 0;
    // 1 to OFFSET_MASK + 1 bytes, as the verifier can see.
    u64 bytes = ((c->frame_bytes - 1) & OFFSET_MASK) + 1;
    for (int i = 0; i < MAX_FRAMES; i++) {
        if (!frame || r->status != READ_OK)
            break;
        if (bpf_probe_read_user(r->raw, bytes, (const void *)frame)) {
            r->status = READ_FAULT;
            break;
        }
        struct frame *f = &r->frame[i];
        f->code = *(u64 *)(r->raw + (c->frame_code & OFFSET_MASK));
        f->instr = *(u64 *)(r->raw + (c->frame_instr & OFFSET_MASK));
        f->owner = c->frame_owner == ~0ULL ? 0 : r->raw[c->frame_owner & OFFSET_MASK];
        f->entry = c->frame_entry == ~0ULL ? 0 : r->raw[c->frame_entry & OFFSET_MASK];
        // (An entry shim, owner 3, runs no code of the program's.)
        if (f->code && f->owner != 3 &&
            bpf_probe_read_user(f->identity, sizeof(f->identity),
                                (const void *)(f->code + c->code_identity))) {
            r->status = READ_FAULT;
            break;
        }
        frame = *(u64 *)(r->raw + (c->frame_previous & OFFSET_MASK));
        n = i + 1;
    }
    if (frame && r->status == READ_OK)
        r->status = READ_TRUNCATED;
    r->frames = n;
    u64 size = HEADER_BYTES + (u64)n * sizeof(struct frame);
    if (size > sizeof(*r))
        size = sizeof(*r);
    bpf_ringbuf_output(&out, r, size, 0);
    // The sample goes on as it would have.
    return 1;
}

char LICENSE[] SEC("license") = "GPL";
