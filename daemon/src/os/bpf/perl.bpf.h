// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// profd's sample-time reader of Perl frames, included by python.bpf.c
// (a perf event takes one program). For the main thread of a process in
// `perl_procs` (the one that runs the main interpreter, PL_curinterp;
// another thread runs an ithreads interpreter of its own, which is not
// read: its record says no thread), it walks the context stacks from the
// current one (PL_curstackinfo) down through si_prev to the main one, each
// from its top context (si_cxix) to its bottom, as caller() does
// (pp_ctl.c's dopoptosub_at), and copies into a record of `out`, innermost
// first, a frame for each sub context: its CV, what identifies the CV (its
// body, start op and GV), and the line and file name's address of the cop
// it is at (PL_curcop for the innermost, then each sub context's
// blk_oldcop, the cop it was called from, for the next). A frame is
// marked where one call of the run loop (Perl_runops_standard) began
// running it: a sub entered from C (call_sv, blk_sub.retop NULL; but a sub
// a sort block's last op called has no op to return to either, and the
// context below it is the block's), a MULTICALL sub (List::Util's callbacks, a sort
// sub), a sort block (a PERLSI_SORT stack whose bottom context is
// CXt_NULL), and the main program (in PERL_PHASE_RUN). A MULTICALL or sort
// stack whose loop is not running (PL_op NULL: the C code between two
// calls of its block) is left out.

// Where Perl keeps what the walk follows, per process (the daemon's
// `PerlConfig`, and where PL_curinterp is).
struct perl_config {
    u64 interp_ptr;      // address of PL_curinterp
    u64 interp_op;       // struct interpreter: Iop
    u64 interp_curcop;   // Icurcop
    u64 interp_stackinfo; // Icurstackinfo
    u64 interp_phase;    // Iphase (an enum, 4 bytes)
    u64 si_cxstack;      // PERL_SI: si_cxstack
    u64 si_prev;         // si_prev
    u64 si_cxix;         // si_cxix (I32)
    u64 si_type;         // si_type (I32)
    u64 cx_bytes;        // sizeof(PERL_CONTEXT); cx_type is its first byte
    u64 cx_oldcop;       // blk_oldcop
    u64 cx_retop;        // blk_sub.retop
    u64 cx_cv;           // blk_sub.cv
    u64 cv_start;        // XPVCV: xcv_start_u
    u64 cv_gv;           // xcv_gv_u
    u64 cop_line;        // COP: cop_line (a u32)
    u64 cop_file;        // cop_file (a C string in a threaded build)
};

#define RUNTIME_PERL 2
// Contexts walked at most (all types, of all stacks).
#define PERL_MAX_CXS 256
// Bytes of a context and of a stack info read: every field used lies in them.
#define PERL_CX_BYTES 80
#define PERL_SI_BYTES 48
#define PERL_CXTYPEMASK 0xf
#define PERL_CXt_NULL 0
#define PERL_CXt_SUB 9
#define PERL_CXt_FORMAT 10
#define PERL_CXt_SUBST 12
#define PERL_CXp_MULTICALL 0x10
#define PERL_CXp_SUB_RE_FAKE 0x80
#define PERLSI_MAIN 1
#define PERLSI_SORT 3
#define PERLSI_MULTICALL 10
#define PERL_PHASE_RUN 4
// A frame's owner byte: a sub's context type, or one of these for a frame
// with no CV (code 0).
#define PERL_FRAME_BLOCK 0xfe
#define PERL_FRAME_MAIN 0xff

struct map_def SEC("maps") perl_procs = {
    .type = MAP_HASH,
    .key_size = sizeof(u32),
    .value_size = sizeof(struct perl_config),
    .max_entries = 4096,
};

// Append a frame to `r`; 0 when there is no room.
static __attribute__((always_inline)) struct frame *perl_frame(struct record *r) {
    // Read back from the record, so that the verifier sees any count below
    // the bound rather than each count on a path of its own.
    u32 n = *(volatile u32 *)&r->frames;
    if (n >= MAX_FRAMES) {
        r->status = READ_TRUNCATED;
        return 0;
    }
    struct frame *f = &r->frame[n & (MAX_FRAMES - 1)];
    f->code = 0;
    f->identity[0] = f->identity[1] = f->identity[2] = f->identity[3] = 0;
    f->owner = 0;
    f->entry = 0;
    r->frames = n + 1;
    return f;
}

// Append a frame at `cop` to `r`: its line, and its file name's address
// (in identity[3]); 0 when there is no room or the cop cannot be read.
static __attribute__((always_inline)) struct frame *perl_frame_at(struct perl_config *c,
                                                                 struct record *r, u64 cop) {
    struct frame *f = perl_frame(r);
    if (!f)
        return 0;
    u32 line = 0;
    if (cop && (bpf_probe_read_user(&line, sizeof(line), (const void *)(cop + c->cop_line)) ||
                word(&f->identity[3], cop + c->cop_file))) {
        r->status = READ_FAULT;
        return 0;
    }
    f->instr = line;
    return f;
}

// The walk's state, kept in a map rather than in registers: read back at
// each step, it is one state to the verifier whichever path the step
// before took (else the paths multiply over the steps).
struct perl_walk {
    u64 cop;        // the cop of the next frame's line
    u64 base;       // the current stack's contexts
    u64 cx;         // its next context (below base: none left)
    u64 prev;       // the stack below it
    u64 type;       // its type (PERLSI_*)
    u64 idle;       // its loop is not running: its frames are left out
    u64 bottom;     // type of the last context read of it; 0xff: none
    u64 bottom_cop; // and that context's blk_oldcop
    u64 done;       // the main stack was walked to its end
};

struct map_def SEC("maps") perl_walks = {
    .type = MAP_PERCPU_ARRAY,
    .key_size = sizeof(u32),
    .value_size = sizeof(struct perl_walk),
    .max_entries = 1,
};

// Start walking the stack info at `si`: its contexts' base, its top
// context, its previous stack and its type.
static __attribute__((always_inline)) int perl_stack(struct perl_config *c, struct record *r,
                                                    volatile struct perl_walk *w, u64 si) {
    if (bpf_probe_read_user(r->raw, PERL_SI_BYTES, (const void *)si))
        return -1;
    u64 base = *(u64 *)(r->raw + (c->si_cxstack & OFFSET_MASK));
    s32 ix = *(s32 *)(r->raw + (c->si_cxix & OFFSET_MASK));
    w->base = base;
    w->prev = *(u64 *)(r->raw + (c->si_prev & OFFSET_MASK));
    w->type = *(u32 *)(r->raw + (c->si_type & OFFSET_MASK));
    // A stack with no context (ix -1) has its top below its base.
    w->cx = base + (s64)ix * (s64)c->cx_bytes;
    w->bottom = 0xff;
    return 0;
}

// One step of the walk: a context, or the end of a stack. 0 to go on.
static __attribute__((always_inline)) int perl_step(struct perl_config *c, struct record *r,
                                                   volatile struct perl_walk *w) {
    u64 cx = w->cx;
    if (cx < w->base) {
        // The end of a stack.
        u64 type = w->type;
        if (type == PERLSI_MAIN || !w->prev) {
            w->done = 1;
            return 1;
        }
        if (!w->idle && type == PERLSI_SORT && w->bottom == PERL_CXt_NULL) {
            struct frame *f = perl_frame_at(c, r, w->cop);
            if (!f)
                return 1;
            f->owner = PERL_FRAME_BLOCK;
            f->entry = 1;
        }
        if (w->bottom != 0xff)
            w->cop = w->bottom_cop;
        w->idle = 0;
        if (perl_stack(c, r, w, w->prev)) {
            r->status = READ_FAULT;
            return 1;
        }
        return 0;
    }
    if (bpf_probe_read_user(r->raw, PERL_CX_BYTES, (const void *)cx)) {
        r->status = READ_FAULT;
        return 1;
    }
    w->cx = cx - c->cx_bytes;
    u8 type = r->raw[0];
    u8 kind = type & PERL_CXTYPEMASK;
    // A substitution's context keeps no cop.
    if (kind == PERL_CXt_SUBST)
        return 0;
    u64 oldcop = *(u64 *)(r->raw + (c->cx_oldcop & OFFSET_MASK));
    w->bottom = kind;
    w->bottom_cop = oldcop;
    if (kind != PERL_CXt_SUB && kind != PERL_CXt_FORMAT)
        return 0;
    u64 retop = *(u64 *)(r->raw + (c->cx_retop & OFFSET_MASK));
    u64 cv = *(u64 *)(r->raw + (c->cx_cv & OFFSET_MASK));
    u8 entry = !retop || (type & PERL_CXp_MULTICALL);
    if (!retop && !(type & PERL_CXp_MULTICALL) && cx - c->cx_bytes >= w->base) {
        // A sub called by the last op of a sort block (or a regex's code
        // block), whose ops end in NULL, has no op to return to either,
        // but runs in the block's loop: the context below it is the
        // block's.
        u8 below = 0;
        if (bpf_probe_read_user(&below, 1, (const void *)(cx - c->cx_bytes))) {
            r->status = READ_FAULT;
            return 1;
        }
        if ((below & PERL_CXTYPEMASK) == PERL_CXt_NULL || (below & PERL_CXp_SUB_RE_FAKE))
            entry = 0;
    }
    if (!w->idle && (!(type & PERL_CXp_SUB_RE_FAKE) || entry)) {
        // A sub that has not run its first statement yet is still at the
        // cop it was called from: its line and file are its own first
        // (the daemon's to find; 0 here).
        struct frame *f = perl_frame_at(c, r, w->cop == oldcop ? 0 : w->cop);
        if (!f)
            return 1;
        f->entry = entry;
        if (type & PERL_CXp_SUB_RE_FAKE) {
            // A regex's code block, run in the sub around it.
            f->owner = PERL_FRAME_BLOCK;
        } else {
            f->code = cv;
            f->owner = kind;
            u64 body = 0;
            if (word(&body, cv) || word(&f->identity[1], body + c->cv_start) ||
                word(&f->identity[2], body + c->cv_gv)) {
                r->status = READ_FAULT;
                return 1;
            }
            f->identity[0] = body;
        }
    }
    w->cop = oldcop;
    return 0;
}

// Read the main thread's Perl frames into `r`.
static __attribute__((always_inline)) void perl_read(struct perl_config *c, struct record *r,
                                                    u32 tgid, u32 tid) {
    u64 interp = 0, op = 0, cop = 0, si = 0;
    u32 phase = 0, zero = 0;
    if (tid != tgid) {
        r->status = READ_NO_THREAD;
        return;
    }
    volatile struct perl_walk *w = bpf_map_lookup_elem(&perl_walks, &zero);
    if (!w) {
        r->status = READ_FAULT;
        return;
    }
    if (word(&interp, c->interp_ptr)) {
        r->status = READ_FAULT;
        return;
    }
    if (!interp) {
        r->status = READ_NO_THREAD;
        return;
    }
    if (word(&op, interp + c->interp_op) || word(&cop, interp + c->interp_curcop) ||
        word(&si, interp + c->interp_stackinfo) ||
        bpf_probe_read_user(&phase, sizeof(phase), (const void *)(interp + c->interp_phase)) ||
        !si || perl_stack(c, r, w, si)) {
        r->status = READ_FAULT;
        return;
    }
    w->cop = cop;
    w->done = 0;
    // The loop of the current MULTICALL or sort stack is not running.
    u64 type = w->type;
    w->idle = !op && (type == PERLSI_SORT || type == PERLSI_MULTICALL);
    for (int i = 0; i < PERL_MAX_CXS; i++) {
        if (perl_step(c, r, w))
            break;
    }
    if (r->status != READ_OK)
        return;
    if (!w->done) {
        r->status = READ_TRUNCATED;
        return;
    }
    if (phase == PERL_PHASE_RUN) {
        struct frame *f = perl_frame_at(c, r, w->cop);
        if (!f)
            return;
        f->owner = PERL_FRAME_MAIN;
        f->entry = 1;
    }
}

static __attribute__((always_inline)) int perl_frames(u32 tgid, u32 tid) {
    struct perl_config *c = bpf_map_lookup_elem(&perl_procs, &tgid);
    if (!c)
        return 1;
    u32 zero = 0;
    struct record *r = bpf_map_lookup_elem(&scratch, &zero);
    if (!r)
        return 1;
    r->time = bpf_ktime_get_ns();
    r->tid = tid;
    r->frames = 0;
    r->status = READ_OK;
    r->runtime = RUNTIME_PERL;
    perl_read(c, r, tgid, tid);
    u32 n = r->frames;
    if (n > MAX_FRAMES)
        n = MAX_FRAMES;
    u64 size = HEADER_BYTES + (u64)n * sizeof(struct frame);
    if (size > sizeof(*r))
        size = sizeof(*r);
    bpf_ringbuf_output(&out, r, size, 0);
    return 1;
}
