// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// profd's sample-time reader of CRuby frames, included by python.bpf.c
// (a perf event takes one program, which reads the frames of whichever
// runtime the sampled process was registered with). For a thread of a
// process in `ruby_procs`, it finds the sampled thread's rb_thread_t by its
// native id among the main ractor's threads, then walks that thread's
// control frames (those of the fiber it runs) from the innermost to the
// bottom, and copies what names each Ruby frame into a record of `out`:
// the iseq and pc, what identifies the iseq (its body, path and label),
// the method entry of the method the frame runs in (from its local
// environment, a block's found through the environments it is nested in),
// and whether the frame ends a call of the VM loop (VM_FRAME_FLAG_FINISH).
// Frames
// of C functions (VM_FRAME_FLAG_CFRAME) are not copied: their native
// frames are in the sample's stack.

// Where CRuby keeps what the walk follows, per process (the daemon's
// `RubyConfig`, and where `ruby_current_vm_ptr` is).
struct ruby_config {
    u64 vm_ptr;          // address of ruby_current_vm_ptr
    u64 vm_main_ractor;  // rb_vm_t.ractor.main_ractor
    u64 ractor_threads;  // rb_ractor_t.threads.set (a list of lt_node)
    u64 thread_tid;      // rb_thread_t.tid (the native id)
    u64 thread_ec;       // rb_thread_t.ec
    u64 cfp_bytes;       // sizeof(rb_control_frame_t)
    u64 cfp_pc;          // rb_control_frame_t.pc
    u64 cfp_iseq;        // .iseq
    u64 cfp_ep;          // .ep (ep[0] holds the frame's flags)
    u64 iseq_body;       // rb_iseq_t.body
    u64 body_location;   // rb_iseq_constant_body.location.pathobj:
                         // .base_label and .label follow
};

#define RUNTIME_RUBY 1
// Control frames walked at most (C functions' included).
#define RUBY_MAX_CFPS 256
// Bytes of each control frame read: pc, sp, iseq, self and ep.
#define RUBY_CFP_BYTES 40
#define RUBY_FRAME_FLAG_FINISH 0x20
#define RUBY_FRAME_FLAG_CFRAME 0x80
#define RUBY_ENV_FLAG_LOCAL 0x02
// Environments followed at most from a block's to its method's.
#define RUBY_MAX_EP_HOPS 6

struct map_def SEC("maps") ruby_procs = {
    .type = MAP_HASH,
    .key_size = sizeof(u32),
    .value_size = sizeof(struct ruby_config),
    .max_entries = 4096,
};

// The execution context of native thread `tid`, 0 when none has it.
static __attribute__((always_inline)) u64 ruby_thread_ec(struct ruby_config *c, u32 tid,
                                                        u32 *status) {
    u64 vm = 0, ractor = 0, node = 0;
    if (word(&vm, c->vm_ptr) || !vm || word(&ractor, vm + c->vm_main_ractor) || !ractor ||
        word(&node, ractor + c->ractor_threads)) {
        *status = READ_FAULT;
        return 0;
    }
    u64 head = ractor + c->ractor_threads;
    // A thread's lt_node is its first field: the node is the thread.
    for (int j = 0; j < MAX_THREADS && node && node != head; j++) {
        u32 id = 0;
        if (bpf_probe_read_user(&id, sizeof(id), (const void *)(node + c->thread_tid))) {
            *status = READ_FAULT;
            return 0;
        }
        if (id == tid) {
            u64 ec = 0;
            if (word(&ec, node + c->thread_ec))
                *status = READ_FAULT;
            return ec;
        }
        if (word(&node, node)) {
            *status = READ_FAULT;
            return 0;
        }
    }
    *status = READ_NO_THREAD;
    return 0;
}

// Read thread `tid`'s Ruby frames into `r`.
static __attribute__((always_inline)) void ruby_read(struct ruby_config *c, struct record *r,
                                                    u32 tid) {
    u64 ec = ruby_thread_ec(c, tid, &r->status);
    if (!ec) {
        if (r->status == READ_OK)
            r->status = READ_NO_THREAD;
        return;
    }
    // rb_execution_context_t begins with vm_stack, vm_stack_size and cfp.
    u64 head[3] = {0, 0, 0};
    if (bpf_probe_read_user(head, sizeof(head), (const void *)ec)) {
        r->status = READ_FAULT;
        return;
    }
    u64 cfp = head[2];
    // Control frames grow down from the stack's end; the bottom one is
    // the thread's (or fiber's) dummy frame, which runs no code.
    u64 end = head[0] + head[1] * 8 - c->cfp_bytes;
    r->frames = 0;
    for (int i = 0; i < RUBY_MAX_CFPS && cfp < end; i++, cfp += c->cfp_bytes) {
        if (bpf_probe_read_user(r->raw, RUBY_CFP_BYTES, (const void *)cfp)) {
            r->status = READ_FAULT;
            return;
        }
        u64 pc = *(u64 *)(r->raw + (c->cfp_pc & OFFSET_MASK));
        u64 iseq = *(u64 *)(r->raw + (c->cfp_iseq & OFFSET_MASK));
        u64 ep = *(u64 *)(r->raw + (c->cfp_ep & OFFSET_MASK));
        u64 flags = 0;
        if (word(&flags, ep)) {
            r->status = READ_FAULT;
            return;
        }
        if ((flags & RUBY_FRAME_FLAG_CFRAME) || !iseq || !pc)
            continue;
        // Read back from the record, so that the verifier sees any count
        // below the bound rather than each count on a path of its own.
        u32 n = *(volatile u32 *)&r->frames;
        if (n >= MAX_FRAMES) {
            r->status = READ_TRUNCATED;
            return;
        }
        struct frame *f = &r->frame[n & (MAX_FRAMES - 1)];
        f->code = iseq;
        f->instr = pc;
        f->entry = (flags & RUBY_FRAME_FLAG_FINISH) != 0;
        if (word(&f->identity[0], iseq + c->iseq_body) ||
            bpf_probe_read_user(&f->identity[1], 3 * sizeof(u64),
                                (const void *)(f->identity[0] + c->body_location))) {
            r->status = READ_FAULT;
            return;
        }
        // The method entry, ep[-2] of the local environment (a block's
        // ep[-1] points to the one it is nested in, tagged in its low bits).
        u64 lep = ep, lflags = flags, cme = 0;
        for (int k = 0; k < RUBY_MAX_EP_HOPS && !(lflags & RUBY_ENV_FLAG_LOCAL); k++) {
            if (word(&lep, lep - 8) || word(&lflags, lep & ~3ULL))
                break;
            lep &= ~3ULL;
        }
        if ((lflags & RUBY_ENV_FLAG_LOCAL) && word(&cme, lep - 16))
            cme = 0;
        f->identity[2] = cme;
        f->owner = 0;
        r->frames = n + 1;
    }
    if (cfp < end)
        r->status = READ_TRUNCATED;
}

static __attribute__((always_inline)) int ruby_frames(u32 tgid, u32 tid) {
    struct ruby_config *c = bpf_map_lookup_elem(&ruby_procs, &tgid);
    if (!c)
        return perl_frames(tgid, tid);
    u32 zero = 0;
    struct record *r = bpf_map_lookup_elem(&scratch, &zero);
    if (!r)
        return 1;
    r->time = bpf_ktime_get_ns();
    r->tid = tid;
    r->frames = 0;
    r->status = READ_OK;
    r->runtime = RUNTIME_RUBY;
    ruby_read(c, r, tid);
    u32 n = r->frames;
    if (n > MAX_FRAMES)
        n = MAX_FRAMES;
    u64 size = HEADER_BYTES + (u64)n * sizeof(struct frame);
    if (size > sizeof(*r))
        size = sizeof(*r);
    bpf_ringbuf_output(&out, r, size, 0);
    return 1;
}
