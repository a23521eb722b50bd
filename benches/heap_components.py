"""profd's heap at its peak by component, from heaptrack's peak stacks
(heaptrack_print -F FILE --flamegraph-cost-type peak: one line a stack,
outermost frame first, frames `function (file.rs)`, then the bytes). A
stack belongs to the component of its innermost frame in profd's own code
that one of the rules below names; used by benches/hostmix.sh --heaptrack.

Usage: python3 heap_components.py PEAK.folded
"""
import re
import sys
from collections import Counter

# (component, pattern on one frame), tried on each frame from the innermost.
RULES = [
    ("unwind tables: sections copied per file (ElfUnwindData::read)",
     r"^(read|fde_ranges|\{closure#0\}|section_info) \(unwind\.rs\)"),
    ("unwinders: framehop modules and rule caches", r"\(unwind\.rs\)"),
    ("Go function tables (gopclntab)", r"\(gopclntab\.rs\)"),
    ("symbolizer: kallsyms", r"\(ksym\.rs\)"),
    ("symbolizer: names kept for every session", r"\(names\.rs\)"),
    ("symbolizer: PLT, split debug files, perf maps, vDSO", r"\((plt|debug|perfmap|vdso)\.rs\)"),
    ("symbolizer: blazesym's parsed ELF and DWARF", r"\(blaze\.rs\)"),
    ("address spaces: mappings, opened files, /proc", r"\((spaces|files|segments)\.rs\)|^(read_sharing|resolve_new|insert|forked|open) \(mod\.rs\)"),
    ("stack tables, function tables, naming (ingest, collector)", r"\((ingest|callchain|collector|recent|timeline|model|unnamed_jit)\.rs\)"),
    ("continuous: processes, labels, window encoding, history", r"\((profiler|service|encode|history|decode|record)\.rs\)"),
    ("sampler: batches, pools, rings", r"\((sampler|batch|demux|waits|event)\.rs\)"),
    ("sessions, gRPC, store", r"\((rpc|answers|conns|calls|guard|stored|store|share|registry|saving|scope)\.rs\)|tonic|h2::|hyper"),
]
RULES = [(name, re.compile(pattern)) for name, pattern in RULES]

totals = Counter()
# Of each component, what object::ReadCache held: the bytes read from a
# file before they are copied out (freed once the file is read).
cached = Counter()
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    if not n.isdigit():
        continue
    component = "other: runtime, start-up, settings"
    frames = stack.split(";")
    inner = []
    for frame in reversed(frames):
        hit = next((name for name, rule in RULES if rule.search(frame)), None)
        if hit:
            component = hit
            break
        inner.append(frame)
    totals[component] += int(n)
    if any("(read_cache.rs)" in f for f in inner):
        cached[component] += int(n)
whole = sum(totals.values()) or 1
for component, n in totals.most_common():
    print("%8.1f MiB %5.1f %%  %s" % (n / 2**20, 100 * n / whole, component))
    if cached[component]:
        print("%8.1f MiB          of which object::ReadCache's copy while the file is read" % (cached[component] / 2**20))
print("%8.1f MiB          the heap at its peak" % (whole / 2**20))
