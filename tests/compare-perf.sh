#!/usr/bin/env bash
# Profiles one workload with `perf record` and with profd, and prints the
# inclusive/exclusive shares side by side:
#
#   perf -g        perf record --call-graph fp    (the kernel's frame-pointer walk)
#   perf dwarf     perf record --call-graph dwarf (user stack copies + CFI)
#   profd auto     profctl run                    (the default unwinding)
#   profd fp       profctl run --unwind fp
#
# perf's figures come from `perf script`, aggregated here the way profd counts:
# exclusive = samples whose innermost frame is the function, inclusive =
# samples with the function anywhere on the stack, once per sample. Both are
# over the workload's samples (its comm), kernel frames included.
#
# Usage: tests/compare-perf.sh [-d SECONDS] [-F HZ] [-n ROWS] [WORKLOAD]
#   WORKLOAD: a build of a workload in tests/workloads:
#     stacks_nofp (default)  stacks.c, -O2 -fomit-frame-pointer
#     stacks_fp              stacks.c, -O2 -fno-omit-frame-pointer (frameless leaves)
#     stacks_rs_nofp         stacks_rs.rs, rustc -C opt-level=2 -C force-frame-pointers=no
#     stacks_rs_fp           stacks_rs.rs, ... force-frame-pointers=yes
#     stacks_dbgframe        stacks.c, ... -fno-asynchronous-unwind-tables (CFI only in .debug_frame)
#     inlined                inlined.c (an always_inline function)
#     gostacks               gostacks.go, go build (frameless leaves)
#     gostacks_strip         gostacks.go, go build -ldflags='-s -w'
#     split, recurse         the frame-pointer workloads of the core tests
#   or the path of an executable, run as `EXE SECONDS`.
#   -d SECONDS: how long each run lasts (default 5); -F HZ: sampling
#   frequency (default 999); -n ROWS: rows shown (default 25, 0 = all).
#
# Needs root, perf (Debian package linux-perf), python3, and gcc, rustc or go
# for the workload. It installs nothing: it says what is missing. profctl is
# taken from $PROFCTL, else the newer of target/release and target/debug
# (built with cargo when neither exists); it uses the daemon on $PROFD_SOCKET or starts a
# private one.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds=5
freq=999
rows=25
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
while getopts "d:F:n:h" opt; do
    case "$opt" in
    d) seconds="$OPTARG" ;;
    F) freq="$OPTARG" ;;
    n) rows="$OPTARG" ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
workload="${1:-stacks_nofp}"
[ $# -le 1 ] || usage

die() { echo "compare-perf: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: perf and profd sample the whole system"
command -v perf >/dev/null || die "perf is missing: install the Debian package linux-perf (apt-get install linux-perf)"
perf version >/dev/null 2>&1 || die "perf does not run: $(perf version 2>&1 | head -n 1); install linux-perf matching this kernel"
command -v python3 >/dev/null || die "python3 is missing: install the Debian package python3"

work="$(mktemp -d /tmp/compare-perf.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# The same flags as tests/src/workload.rs.
c_o2=(-O2 -g -fno-inline-small-functions -fno-optimize-sibling-calls -Wall)
rust_o2=(--edition=2021 -Copt-level=2 -g)
c_core=(-O1 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-inline -fno-optimize-sibling-calls -g -Wall)
build() { # build NAME COMPILER SOURCE FLAGS...
    local name="$1" compiler="$2" source="$root/tests/workloads/$3"
    shift 3
    command -v "$compiler" >/dev/null || die "$compiler is missing (needed to build $name)"
    "$compiler" "$@" -o "$work/$name" "$source" || die "building $name failed"
    exe="$work/$name"
}
case "$workload" in
stacks_nofp) build "$workload" "${CC:-cc}" stacks.c "${c_o2[@]}" -fomit-frame-pointer ;;
stacks_fp) build "$workload" "${CC:-cc}" stacks.c "${c_o2[@]}" -fno-omit-frame-pointer ;;
stacks_rs_nofp) build "$workload" "${RUSTC:-rustc}" stacks_rs.rs "${rust_o2[@]}" -Cforce-frame-pointers=no ;;
stacks_rs_fp) build "$workload" "${RUSTC:-rustc}" stacks_rs.rs "${rust_o2[@]}" -Cforce-frame-pointers=yes ;;
stacks_dbgframe) build "$workload" "${CC:-cc}" stacks.c "${c_o2[@]}" -fomit-frame-pointer -fno-asynchronous-unwind-tables ;;
inlined) build "$workload" "${CC:-cc}" inlined.c "${c_o2[@]}" -fno-omit-frame-pointer ;;
gostacks | gostacks_strip)
    flags=()
    [ "$workload" = gostacks ] || flags=(-ldflags='-s -w')
    GOCACHE="$work/go-cache" GOPATH="$work/go-path" GO111MODULE=off \
        build "$workload" "${GO:-go}" gostacks.go build "${flags[@]}"
    ;;
split | recurse) build "$workload" "${CC:-cc}" "$workload.c" "${c_core[@]}" ;;
*)
    [ -x "$workload" ] || die "unknown workload '$workload' (not a known build, nor an executable)"
    exe="$(cd "$(dirname "$workload")" && pwd)/$(basename "$workload")"
    ;;
esac

profctl="${PROFCTL:-}"
if [ -z "$profctl" ]; then # the most recently built one
    for p in "$root/target/release/profctl" "$root/target/debug/profctl"; do
        [ -x "$p" ] && { [ -z "$profctl" ] || [ "$p" -nt "$profctl" ]; } && profctl="$p"
    done
fi
if [ -z "$profctl" ]; then
    echo "compare-perf: building profctl (cargo build --release -p profctl)" >&2
    (cd "$root" && cargo build --release -q -p profctl) || die "cannot build profctl"
    profctl="$root/target/release/profctl"
fi

echo "workload: $exe $seconds   (perf $(perf version | awk '{print $3}'), $freq Hz, $seconds s per run)" >&2
echo "compare-perf: perf record -g ..." >&2
perf record -q -F "$freq" --call-graph fp -o "$work/fp.data" -- "$exe" "$seconds" >/dev/null
echo "compare-perf: perf record --call-graph dwarf ..." >&2
perf record -q -F "$freq" --call-graph dwarf,16384 -o "$work/dwarf.data" -- "$exe" "$seconds" >/dev/null
for d in fp dwarf; do
    perf script -i "$work/$d.data" -F comm,ip,sym,dso >"$work/perf-$d.txt" 2>/dev/null ||
        die "perf script failed on $work/$d.data"
done
echo "compare-perf: $profctl run ..." >&2
"$profctl" run --freq "$freq" --format json -- "$exe" "$seconds" >"$work/profd-auto.json" 2>"$work/profd-auto.err" ||
    die "profctl run failed: $(cat "$work/profd-auto.err")"
echo "compare-perf: $profctl run --unwind fp ..." >&2
"$profctl" run --freq "$freq" --unwind fp --format json -- "$exe" "$seconds" >"$work/profd-fp.json" 2>"$work/profd-fp.err" ||
    die "profctl run --unwind fp failed: $(cat "$work/profd-fp.err")"

python3 - "$work" "$(basename "$exe")" "$rows" <<'PY'
import collections, json, re, sys

work, exe_name, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
comm = exe_name[:15]


def frame_name(line):
    """The function of a `perf script -F ip,sym,dso` frame line:
    `<ip> <sym>[+0xoff] (<dso>)`, or `<ip> <sym> (inlined)` for an inlined
    frame (marked ` [inlined]` as in profctl's tables)."""
    parts = line.strip().split(None, 1)
    rest = parts[1] if len(parts) > 1 else "[unknown]"
    inlined = rest.endswith(" (inlined)")
    if inlined:
        rest = rest.removesuffix(" (inlined)")
    else:
        rest = re.sub(r"\s+\([^()]*\)$", "", rest)
    rest = re.sub(r"\+0x[0-9a-f]+$", "", rest)
    return rest + (" [inlined]" if inlined else "")



def perf_profile(path):
    """(samples, {name: (inclusive %, exclusive %)}) from `perf script` text."""
    incl, excl, total = collections.Counter(), collections.Counter(), 0
    frames, keep = None, False

    def flush():
        nonlocal total
        if frames is None or not keep:
            return
        total += 1
        excl[frames[0] if frames else "[unknown]"] += 1
        for f in set(frames):
            incl[f] += 1

    with open(path, errors="replace") as text:
        for line in text:
            line = line.rstrip("\n")
            if not line.strip():
                flush()
                frames = None
            elif not line[0].isspace():
                flush()
                frames, keep = [], line.split()[0] == comm if line.split() else False
            elif frames is not None:
                frames.append(frame_name(line))
    flush()
    pct = lambda n: 100.0 * n / total if total else 0.0
    return total, {f: (pct(incl[f]), pct(excl[f])) for f in incl}


def profd_profile(path):
    with open(path) as f:
        doc = json.load(f)
    funcs = {}
    for f in doc["functions"]:
        name = f["name"] + (" [inlined]" if f.get("inlined") else "")
        i, e = funcs.get(name, (0.0, 0.0))
        funcs[name] = (i + f["inclusive_pct"], e + f["exclusive_pct"])
    return doc["totals"]["attributed"], funcs, doc


columns = []
for label, d in (("perf -g", "fp"), ("perf dwarf", "dwarf")):
    columns.append((label,) + perf_profile(f"{work}/perf-{d}.txt"))
notes = []
for label, d in (("profd auto", "auto"), ("profd fp", "fp")):
    total, funcs, doc = profd_profile(f"{work}/profd-{d}.json")
    columns.append((label, total, funcs))
    t = doc["totals"]
    notes.append(
        f"{label}: unwind {doc.get('unwind', '?')}, stack_bytes {doc.get('stack_bytes', '?')}, "
        f"truncated {t.get('truncated', '?')}, unsymbolized {t.get('unsymbolized', '?')}, "
        f"lost {t.get('lost', '?')}"
    )

# Rows: by profd auto's inclusive share, then by perf dwarf's.
names = set()
for _, _, funcs in columns:
    names.update(funcs)
key = lambda n: (-columns[2][2].get(n, (0, 0))[0], -columns[1][2].get(n, (0, 0))[0], n)
ordered = sorted(names, key=key)
if rows > 0:
    ordered = ordered[:rows]
width = min(max([len(n) for n in ordered] + [8]), 60)
cut = lambda n: n if len(n) <= width else n[: width - 1] + "…"

print(f"{'':{width}}" + "".join(f" | {label:^13}" for label, _, _ in columns))
print(f"{'FUNCTION':{width}}" + " |  INCL%  EXCL%" * len(columns))
print(f"{'samples':{width}}" + "".join(f" | {total:>13}" for _, total, _ in columns))
print("-" * (width + 16 * len(columns)))
for n in ordered:
    cells = []
    for _, _, funcs in columns:
        if n in funcs:
            i, e = funcs[n]
            cells.append(f" | {i:6.1f} {e:6.1f}")
        else:
            cells.append(f" | {'-':>6} {'-':>6}")
    print(f"{cut(n):{width}}" + "".join(cells))
hidden = len(names) - len(ordered)
if hidden > 0:
    print(f"… {hidden} more functions (-n 0 shows all)")
print()
for note in notes:
    print(note)
PY
