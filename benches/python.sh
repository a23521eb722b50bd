#!/usr/bin/env bash
# What reading Python frames costs, measured side by side with py-spy in
# one run, on Debian's python3:
#
#  target  A fixed amount of Python work (benches/workloads/py_work.py:
#          outer() calls hot_a three times and hot_b once, timed by the
#          program itself once the profiler is attached) run, over --rounds
#          rounds in rotating order,
#            bare
#            under py-spy record --rate 999 --nonblocking      (py-spy)
#            under profd: profctl attach PID --freq 999   (profd: stack
#                         copies, Python frames read at each sample)
#          and its CPU and wall time compared: each profiler's slowdown
#          against bare (medians), and profd's over py-spy's.
#  daemon  profd's CPU per sample (its threads' schedstat over a session,
#          over the session's attributed samples) of the same Python work,
#          and of a C program of the same split (tests/workloads/split.c):
#          what Python's frames add; and of Debian's ruby and perl running
#          the same split (tests/workloads/rb_split.rb, pl_split.pl), their
#          frames read. Where kernel.bpf_stats_enabled can be
#          set and bpftool is installed, the BPF program's own time per
#          sample (it runs in the sampled thread's interrupt, so it is the
#          target's time, not the daemon's).
#
# Usage: benches/python.sh [--rounds N] [--calls N] [--no-build] [--keep]
#   --rounds N   target rounds (default 5)
#   --calls N    outer() calls of the work (default 20000: about 8 s bare)
#   --no-build   use the release binaries already built
#   --keep       keep the work directory
#
# Needs root (perf_event_open and BPF for every process), python3, gcc, and
# py-spy (python3 -m pip install py-spy). Builds the release binaries
# (cargo build --release -p profd -p profctl) unless --no-build; set
# CARGO_TARGET_DIR to use another build.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/lib.sh

rounds=5 calls=20000 build=1 keep=0
die() { echo "python: $*" >&2; exit 1; }
say() { echo "python: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds="${2:?--rounds needs a number}"; shift ;;
    --calls) calls="${2:?--calls needs a number}"; shift ;;
    --no-build) build=0 ;;
    --keep) keep=1 ;;
    -h | --help) usage ;;
    *) echo "python: unknown option '$1'" >&2; usage ;;
    esac
    shift
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a whole number ≥ 1, not '$rounds'"
[[ "$calls" =~ ^[1-9][0-9]*$ ]] || die "--calls must be a whole number ≥ 1, not '$calls'"
[ "$(id -u)" = 0 ] || die "run as root: profd samples every process and loads a BPF program"
python=/usr/bin/python3
[ -x "$python" ] || die "no $python: install Debian's python3"
command -v py-spy >/dev/null || die "py-spy is missing: python3 -m pip install py-spy"

target_dir="${CARGO_TARGET_DIR:-target}"
if [ "$build" = 1 ]; then
    cargo build --release -q -p profd -p profctl || die "the release build failed"
fi
profd="$target_dir/release/profd" profctl="$target_dir/release/profctl"
[ -x "$profd" ] && [ -x "$profctl" ] || die "no release binaries in $target_dir/release (drop --no-build)"

start_work bench-python
work_py="$PWD/benches/workloads/py_work.py"
gcc -O2 -g -o "$work/split" tests/workloads/split.c || die "cannot build tests/workloads/split.c"
start_profd

# One run of the work under $1 (bare, py-spy, profd); prints "CPU WALL".
run_once() {
    local how="$1" out="$work/run.out" go="$work/go" pid profiler=''
    rm -f "$go" "$out"
    mkfifo "$go"
    exec 3<>"$go"
    "$python" "$work_py" "$calls" <"$go" >"$out" &
    pid=$!
    until grep -q ready "$out" 2>/dev/null; do sleep 0.05; done
    case "$how" in
    py-spy)
        py-spy record --rate 999 --nonblocking --pid "$pid" --format raw --output "$work/py-spy.txt" >"$work/py-spy.log" 2>&1 &
        profiler=$!
        ;;
    profd)
        "$profctl" attach "$pid" --freq 999 --format json >"$work/profd.json" 2>"$work/profctl.log" &
        profiler=$!
        ;;
    esac
    # The profiler attached (py-spy reads the interpreter's state first).
    [ -n "$profiler" ] && sleep 1
    echo >&3
    wait "$pid"
    exec 3>&-
    if [ -n "$profiler" ] && ! wait "$profiler"; then
        die "the $how run's profiler failed: $(cat "$work/profctl.log" "$work/py-spy.log" 2>/dev/null)"
    fi
    awk '/^cpu/ { print $2, $4 }' "$out"
}

say "target: $rounds rounds of $calls calls (load $(loadavg))"
declare -A cpu wall
hows=(bare py-spy profd)
for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < 3; k++)); do
        how="${hows[(r + k) % 3]}"
        read -r c w < <(run_once "$how")
        cpu[$how]+="$c " wall[$how]+="$w "
        say "round $((r + 1)) $how: cpu $c s, wall $w s"
    done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
printf '\n%-8s %10s %10s %10s %10s\n' "" "cpu s" "wall s" "cpu ×bare" "wall ×bare"
for how in "${hows[@]}"; do
    c="$(med "${cpu[$how]}")" w="$(med "${wall[$how]}")"
    printf '%-8s %10.3f %10.3f %10.3f %10.3f\n' "$how" "$c" "$w" \
        "$(awk -v a="$c" -v b="$(med "${cpu[bare]}")" 'BEGIN { print a / b }')" \
        "$(awk -v a="$w" -v b="$(med "${wall[bare]}")" 'BEGIN { print a / b }')"
done
slow() { awk -v a="$(med "${cpu[$1]}")" -v b="$(med "${cpu[bare]}")" 'BEGIN { print (a / b - 1) * 100 }'; }
printf 'slowdown (cpu): py-spy %.2f %%, profd %.2f %%\n' "$(slow py-spy)" "$(slow profd)"

# The daemon's CPU per sample: Python, then C of the same split.
stats_was=''
if [ -w /proc/sys/kernel/bpf_stats_enabled ] && command -v bpftool >/dev/null; then
    stats_was="$(cat /proc/sys/kernel/bpf_stats_enabled)"
    echo 1 >/proc/sys/kernel/bpf_stats_enabled
fi
before_cleanup() { if [ -n "$stats_was" ]; then echo "$stats_was" >/proc/sys/kernel/bpf_stats_enabled; fi; }
bpf_stats() { bpftool prog show name python_frames 2>/dev/null | awk '/run_time_ns/ { for (i = 1; i < NF; i++) { if ($i == "run_time_ns") t = $(i + 1); if ($i == "run_cnt") n = $(i + 1) } } END { print t + 0, n + 0 }'; }
per_sample() {
    local what="$1" a b n
    shift
    "$@" </dev/null >/dev/null &
    local pid=$!
    sleep 1
    # A first session reads the target's unwind tables and names.
    "$profctl" attach "$pid" --freq 999 --duration 1 >/dev/null
    a="$(proc_cpu "$profd_pid")"
    "$profctl" attach "$pid" --freq 999 --duration 8 --format json >"$work/daemon.json"
    b="$(proc_cpu "$profd_pid")"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    n="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["totals"]["attributed"])' "$work/daemon.json")"
    awk -v a="$a" -v b="$b" -v n="$n" -v w="$what" 'BEGIN { printf "daemon CPU per sample, %s: %.2f µs (%d samples)\n", w, (b - a) / n * 1e6, n }'
}
echo
read -r t0 n0 < <(bpf_stats || echo "0 0")
per_sample "python3 (Python frames read)" "$python" "$work_py" 1000000000
read -r t1 n1 < <(bpf_stats || echo "0 0")
per_sample "C split" "$work/split" 60
if [ -x /usr/bin/ruby ]; then
    per_sample "ruby (Ruby frames read)" /usr/bin/ruby tests/workloads/rb_split.rb 1000000000 split
else
    say "no /usr/bin/ruby: Ruby's figure is left out (apt-get install ruby)"
fi
per_sample "perl (Perl frames read)" /usr/bin/perl tests/workloads/pl_split.pl 1000000000 split
if [ -n "$stats_was" ] && [ "$n1" -gt "$n0" ]; then
    awk -v t="$((t1 - t0))" -v n="$((n1 - n0))" 'BEGIN { printf "BPF program per sample (in the target): %.0f ns over %d runs\n", t / n, n }'
fi
