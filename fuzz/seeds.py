#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus: fuzz/corpus/record/ and fuzz/corpus/unwind/.

The record seeds are the record parser's byte fixtures (daemon/src/os/perf/record_tests.rs)
laid out for profd's own two layouts, one record each and a few rings; the unwind seeds
use the unwind target's input format (see fuzz/fuzz_targets/unwind.rs). Deterministic:
rerunning it rewrites the same files. Run from anywhere: python3 fuzz/seeds.py
"""

import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent

# perf_event.h values (x86-64).
SAMPLE, MMAP2, COMM, EXIT, FORK = 9, 10, 3, 4, 7
LOST, THROTTLE, UNTHROTTLE = 2, 5, 6
MISC_KERNEL, MISC_USER = 1, 2
MISC_COMM_EXEC = 1 << 13
MISC_MMAP_BUILD_ID = 1 << 14
CONTEXT_KERNEL = (1 << 64) - 128
CONTEXT_USER = (1 << 64) - 512
REGS_ABI_64 = 2
KADDR = [0xFFFF_FFFF_8100_0010, 0xFFFF_FFFF_8100_0200]
UADDR = [0x5555_5555_1000, 0x5555_5555_2000, 0x7F00_0000_3000]

# Mode byte of the record target.
PLAIN, STACK, NO_ID_ALL, RING = 0, 1, 4, 8


def u64(*vs):
    return b"".join(struct.pack("<Q", v) for v in vs)


def pair(a, b):
    return u64(a | (b << 32))


def c_str(s):
    padded = (len(s) + 1 + 7) // 8 * 8
    return s + b"\0" * (padded - len(s))


def record(kind, misc, body):
    return struct.pack("<IHH", kind, misc, 8 + len(body)) + body


# The sample_id trailer of profd's layouts (TID, TIME, CPU, IDENTIFIER set).
TRAILER = pair(4242, 4243) + u64(1_000_000_007) + pair(1, 0) + u64(0x1234)

# identifier, ip, pid/tid, time, cpu/res, period, then the callchain.
HEAD = u64(0x1234, KADDR[0]) + pair(4242, 4243) + u64(1_000_000_007) + pair(1, 0) + u64(10_101_010)
CHAIN = u64(7, CONTEXT_KERNEL, KADDR[0], KADDR[1], CONTEXT_USER, *UADDR)
KCHAIN = u64(3, CONTEXT_KERNEL, KADDR[0], KADDR[1])


def stack_part(stack, dyn_size):
    """abi, regs (bp, sp, ip), size, data, dyn_size; size 0 has no dyn_size."""
    regs = u64(REGS_ABI_64, 0x7FFC_0000_1010, 0x7FFC_0000_1000, UADDR[0])
    if not stack:
        return regs + u64(0)
    return regs + u64(len(stack)) + stack + u64(dyn_size)


def record_seeds():
    stack = bytes(range(64))
    mmap2 = pair(100, 100) + u64(0x7F00_0000_0000, 0x1000, 0x2000) + pair(8, 1) + u64(1_234_567, 9)
    mmap2 += pair(5, 2) + c_str(b"/usr/lib/x86_64-linux-gnu/libc.so.6") + TRAILER
    build_id = pair(300, 301) + u64(0x5555_0000_0000, 0x3000, 0) + bytes([20, 0, 0, 0])
    build_id += bytes(range(1, 21)) + pair(5, 2) + c_str(b"/bin/true") + TRAILER
    task = pair(700, 1) + pair(702, 1) + u64(4444) + TRAILER
    seeds = {
        "sample_callchain": (PLAIN, record(SAMPLE, MISC_KERNEL, HEAD + CHAIN)),
        "sample_stack": (STACK, record(SAMPLE, MISC_USER, HEAD + KCHAIN + stack_part(stack, 48))),
        "sample_no_regs": (STACK, record(SAMPLE, MISC_KERNEL, HEAD + KCHAIN + u64(0, 0))),
        "sample_no_stack": (STACK, record(SAMPLE, MISC_USER, HEAD + KCHAIN + stack_part(b"", 0))),
        "mmap2": (PLAIN, record(MMAP2, MISC_USER, mmap2)),
        "mmap2_build_id": (STACK, record(MMAP2, MISC_USER | MISC_MMAP_BUILD_ID, build_id)),
        "comm_exec": (PLAIN, record(COMM, MISC_COMM_EXEC, pair(500, 501) + c_str(b"bash") + TRAILER)),
        "comm_no_id_all": (PLAIN | NO_ID_ALL, record(COMM, 0, pair(600, 600) + c_str(b"kworker/"))),
        "fork": (PLAIN, record(FORK, 0, task)),
        "exit": (STACK, record(EXIT, 0, task)),
        "lost": (PLAIN, record(LOST, 0, u64(31, 1234) + TRAILER)),
        "throttle": (PLAIN, record(THROTTLE, 0, u64(42, 43, 44) + TRAILER)),
        "unthrottle": (STACK, record(UNTHROTTLE, 0, u64(42, 43, 44) + TRAILER)),
    }
    out = {name: bytes([mode]) + rec for name, (mode, rec) in seeds.items()}

    # Layout::new from the input (mode 2): every scalar bit, callchain, regs and stack.
    all_bits = 0x1_0000 | 0x1 | 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x200 | 0x100 | 0x20 | 0x1000 | 0x2000
    regs = (1 << 6) | (1 << 7) | (1 << 8)
    body = u64(11, 12) + pair(13, 14) + u64(15, 16, 17, 18) + pair(19, 0) + u64(20)
    body += u64(1, UADDR[0]) + stack_part(bytes(range(32)), 16)
    out["layout_all_bits"] = (
        bytes([2]) + u64(all_bits, regs) + b"\1" + record(SAMPLE, MISC_USER, body)
    )

    # Rings: profd's records back to back, the last one wrapping the ring's end.
    def ring(mode, size, start, records):
        data = bytearray(size)
        pos = start
        for r in records:
            for b in r:
                data[pos % size] = b
                pos += 1
        return bytes([mode | RING]) + u64(start, pos - start) + bytes(data)

    comm = record(COMM, MISC_COMM_EXEC, pair(500, 501) + c_str(b"bash") + TRAILER)
    lost = record(LOST, 0, u64(31, 1234) + TRAILER)
    plain = [comm, record(SAMPLE, MISC_KERNEL, HEAD + CHAIN), lost]
    with_stack = [
        comm,
        record(SAMPLE, MISC_USER, HEAD + KCHAIN + stack_part(stack, 48)),
        lost,
        record(SAMPLE, MISC_KERNEL, HEAD + KCHAIN + u64(0, 0)),
    ]
    # 352 bytes of records from offset 320 of 512: the stack sample wraps the end.
    out["ring_wrapping"] = ring(STACK, 512, 1000 * 512 + 320, with_stack)
    out["ring_plain"] = ring(PLAIN, 256, 0, plain)
    # A tail near the u64 wrap, as after a very long session.
    out["ring_counter_wrap"] = ring(PLAIN, 256, (1 << 64) - 64, plain)
    # Found by fuzzing (see walk_ring's tests): a record size that is not a multiple of 8.
    out["regress_ring_odd_size"] = bytes.fromhex(
        "3a0300ffff02e8ff9d9e8d8d8d8d8d8d8d8d8d8d8d8d8d8d8d8d7368000000009210030093d9bbce0f0000"
    )
    return out


# Unwind target flags.
REAL, IP_IN_CODE, BP_NEAR_SP, RELOCATE = 1, 2, 4, 8


def code(offset, lib=None):
    """A relocated code address `offset` into the fuzz binary's text, or into another
    executable mapping (`lib`: 0, 1, ... modulo their number)."""
    pick = 0 if lib is None else 128 + lib
    return (0xC << 60) | (pick << 52) | offset


def stack_ref(offset):
    """A relocated stack address: sp + offset."""
    return (0xD << 60) | offset


def regs(ip=0, sp=0, bp=0):
    return u64(ip, sp, bp)


def patch(off, value):
    return struct.pack("<H", off) + u64(value)


def unwind_seeds():
    sp = 0x7FFC_0000_1000
    # A frame-pointer chain of three frames with return addresses in the fuzz binary's text.
    fp_chain = u64(0, 0, stack_ref(0x20), code(0x1234), stack_ref(0x40), code(0x5678))
    fp_chain += u64(0, 0, 0, code(0x9ABC))
    return {
        "real": bytes([REAL]) + regs() + struct.pack("<H", 0),
        "real_short_copy": bytes([REAL]) + regs() + struct.pack("<H", 96),
        "real_ip_elsewhere": bytes([REAL | IP_IN_CODE]) + regs(ip=0x40_0000) + struct.pack("<H", 0),
        "real_patched": bytes([REAL | RELOCATE]) + regs() + struct.pack("<H", 0)
        + patch(0x18, code(0x2000)) + patch(0x40, stack_ref(0x400)) + patch(0x100, 0),
        "real_sp_moved": bytes([REAL]) + regs(sp=0x40) + struct.pack("<H", 0),
        "fp_chain": bytes([IP_IN_CODE | RELOCATE]) + regs(0x1000, sp, sp + 0x10) + fp_chain,
        "fp_chain_bp_near_sp": bytes([BP_NEAR_SP | RELOCATE]) + regs(UADDR[0], sp, 0x10) + fp_chain,
        "ip_in_libs": bytes([IP_IN_CODE | RELOCATE]) + regs((0x80 << 56) | 0x777, sp, 0)
        + u64(code(0x10, 1), code(0x20, 2), code(0x30, 3), 0),
        "empty_stack": bytes([IP_IN_CODE]) + regs(0x4321, sp, 0),
        "bp_zero": bytes([0]) + regs(0x4444, 0x1000, 0) + bytes(16),
        # Found by fuzzing (see unwind.rs's tests): sp = 0 in libgcc's _Unwind_Resume epilogue
        # (CFA rsp + 0) and sp = u64::MAX - 1 in a PLT stub (CFA rsp + 8). Which module the
        # top byte of ip picks depends on how many are mapped.
        "regress_sp_zero": bytes.fromhex("92265442fffffff0ff"),
        "regress_sp_max": bytes([IP_IN_CODE]) + regs((128 << 56) | 0x10, (1 << 64) - 2, 0),
    }


def main():
    for name, seeds in (("record", record_seeds()), ("unwind", unwind_seeds())):
        folder = HERE / "corpus" / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for seed, data in sorted(seeds.items()):
            (folder / seed).write_bytes(data)
        print(f"{folder.relative_to(HERE.parent)}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes")


if __name__ == "__main__":
    main()
