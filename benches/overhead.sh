#!/usr/bin/env bash
# What profd costs, measured side by side with perf in one run:
#
#  overhead  A fixed-work target (benches/workloads/fixed_work.c: two busy
#            threads, call stacks 10-14 frames deep, frame pointers
#            everywhere) run
#              bare
#              under perf record -a -g -F 999                (perf-fp)
#              under perf record -a --call-graph dwarf -F 999 (perf-dwarf)
#              under profd: profctl run --unwind fp          (profd-fp)
#              under profd: profctl run --unwind dwarf --stack-bytes 8192
#                                                            (profd-dwarf:
#                            8 KiB of stack a sample, as perf copies)
#            profctl streams 1 update/s for the target's whole life. The
#            configurations are interleaved over --rounds rounds (the order
#            rotates each round) and their medians compared: the target's
#            wall and CPU time, its slowdown against bare, the profiler's own
#            CPU time, and the ratio profd slowdown / perf slowdown; then
#            the two slowdowns paired by round (each against that round's
#            bare run): the median of profd's minus perf's.
#  steady    Daemon CPU in the steady state: one session (fp, then dwarf) on
#            the same target, streaming 1 update/s; profd's CPU time over a
#            window after a warm-up, as a share of one core, per sample, and
#            scaled to a full 2 × 999 samples/s; and its memory.
#  costs     What profd's frame-pointer CPU is made of: its CPU over a window
#            with the target asleep or running the fixed work, an update
#            every 10 s or every second; and perf record -a -g's own CPU
#            over the same window on the fixed work.
#  latency   Attach → first Watch update: daemon/examples/latency.rs,
#            --latency-runs times on a busy target.
#  memory    10 sessions, each on its own many_stacks target
#            (benches/workloads/many_stacks.c: --rss-paths distinct call
#            paths, run as SCHED_IDLE so that it only takes idle CPU), each
#            watched by profctl at 1 update/s: --rss-warmup minutes for the
#            sessions to find their stacks and fill their 600 s window of
#            recent samples, then the --rss-minutes measured; profd's memory
#            sampled every 30 s throughout; then the unique (folded) stacks
#            of every session.
#
# Usage: benches/overhead.sh [--quick] [--rounds N] [--rss-minutes M] [--rss-warmup M]
#                            [--latency-runs N] [--rss-unwind MODE] [--rss-paths N]
#                            [--only PHASES] [--nice N] [--no-build] [--keep]
#   --quick           short runs for a CI smoke test (2 rounds of ~1.5 s,
#                     4 s steady windows, 3 latency runs, 0.5 + 0.5 min of
#                     memory)
#   --rounds N        overhead rounds (default 5)
#   --rss-minutes M   the memory scenario's measured minutes, over which its
#                     memory should stay flat (default 10; fractions allowed)
#   --rss-warmup M    minutes of the memory scenario before those (default 10:
#                     the longest window of recent samples, 600 s, fills by
#                     design; fractions allowed, 0 for none)
#   --latency-runs N  Attach/Watch cycles timed (default 10)
#   --rss-paths N     call paths of each many_stacks target, 1-16384 (default
#                     10240: a session holds 10 000 or more unique stacks after
#                     its first minutes and gains few after that)
#   --rss-unwind M    unwinding of the memory scenario's sessions: auto, fp or
#                     dwarf (default auto, the daemon's default)
#   --only PHASES     run only these phases, comma-separated (overhead,
#                     steady, costs, latency, memory; default all)
#   --nice N          run everything measured (targets, perf, profd, profctl)
#                     at this nice level, e.g. -10 on a machine others load:
#                     all configurations alike, so the comparison stays fair
#                     (with autogroups, the nice level of the caller's
#                     session too, until the script exits)
#   --no-build        use the release binaries already built
#   --keep            keep the work directory (logs, profiles, figures)
#
# Needs root, perf (Debian package linux-perf), gcc, chrt (util-linux) and
# cargo. Builds the release binaries (cargo build --release --workspace
# --bins, and the latency example), starts its own profd on a private socket
# with --no-persist, and stops every process it started when it exits.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/benches/lib.sh"
rounds=5
rss_minutes=10
rss_warmup=10
latency_runs=10
rss_unwind=auto
rss_paths=10240
# What perf record --call-graph dwarf copies of each sample's stack; profd-dwarf
# copies as much (its own default is 16 KiB).
perf_stack_bytes=8192
phases=overhead,steady,costs,latency,memory
nice_level=''
build=1
keep=0
quick=0
freq=999
work_s=8     # bare run time of the fixed-work target (calibrated)
warm_s=3     # steady state: warm-up before the window...
steady_s=30  # ...and the window
costs_warm_s=15 # costs: warm-up past the first update of a 10 s interval
rss_every=30 # seconds between memory samples
rss_sessions=10

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
die() { echo "overhead: $*" >&2; exit 1; }
say() { echo "overhead: $*" >&2; }

given_rounds='' given_rss='' given_warmup='' given_latency=''
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --rounds) given_rounds="${2:?--rounds needs a number}"; shift ;;
    --rss-minutes) given_rss="${2:?--rss-minutes needs a number}"; shift ;;
    --rss-warmup) given_warmup="${2:?--rss-warmup needs a number}"; shift ;;
    --latency-runs) given_latency="${2:?--latency-runs needs a number}"; shift ;;
    --rss-paths) rss_paths="${2:?--rss-paths needs a number}"; shift ;;
    --rss-unwind) rss_unwind="${2:?--rss-unwind needs auto, fp or dwarf}"; shift ;;
    --only) phases="${2:?--only needs phases, e.g. overhead,steady}"; shift ;;
    --nice) nice_level="${2:?--nice needs a level, -20..19}"; shift ;;
    --no-build) build=0 ;;
    --keep) keep=1 ;;
    -h | --help) usage ;;
    *) echo "overhead: unknown option '$1'" >&2; usage ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    rounds=2 rss_minutes=0.5 rss_warmup=0.5 latency_runs=3 work_s=1.5 warm_s=1 steady_s=4 costs_warm_s=1 rss_every=10
fi
rounds="${given_rounds:-$rounds}"
rss_minutes="${given_rss:-$rss_minutes}"
rss_warmup="${given_warmup:-$rss_warmup}"
latency_runs="${given_latency:-$latency_runs}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a whole number ≥ 1, not '$rounds'"
[[ "$latency_runs" =~ ^[1-9][0-9]*$ ]] || die "--latency-runs must be a whole number ≥ 1, not '$latency_runs'"
if ! [[ "$rss_minutes" =~ ^[0-9]*\.?[0-9]+$ ]] || ! awk -v m="$rss_minutes" 'BEGIN { exit !(m > 0) }'; then
    die "--rss-minutes must be a number of minutes above 0, not '$rss_minutes'"
fi
[[ "$rss_warmup" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--rss-warmup must be a number of minutes, 0 or more, not '$rss_warmup'"
[[ "$rss_paths" =~ ^[1-9][0-9]*$ ]] && ((rss_paths <= 16384)) ||
    die "--rss-paths must be a number of call paths from 1 to 16384, not '$rss_paths'"
[[ "$rss_unwind" =~ ^(auto|fp|dwarf)$ ]] || die "--rss-unwind must be auto, fp or dwarf, not '$rss_unwind'"
[[ "$phases" =~ ^(overhead|steady|costs|latency|memory)(,(overhead|steady|costs|latency|memory))*$ ]] ||
    die "--only takes phases from overhead, steady, costs, latency, memory (comma-separated), not '$phases'"
[[ -z "$nice_level" || "$nice_level" =~ ^-?[0-9]+$ ]] || die "--nice must be a whole number, -20..19, not '$nice_level'"
wants() { [[ ",$phases," == *",$1,"* ]]; }

# ------------------------------------------------------------------ checks

[ "$(id -u)" = 0 ] || die "run as root: perf -a and profd sample the whole system"
need_perf
command -v "${CC:-gcc}" >/dev/null || die "${CC:-gcc} is missing (apt-get install gcc)"
command -v chrt >/dev/null || die "chrt is missing (apt-get install util-linux)"
command -v cargo >/dev/null || die "cargo is missing"

bin="${CARGO_TARGET_DIR:-$root/target}/release"
if [ "$build" = 1 ]; then
    say "building release binaries"
    (cd "$root" && cargo build --release -q --workspace --bins &&
        cargo build --release -q -p profd --example latency) || die "the release build failed"
fi
profd="$bin/profd" profctl="$bin/profctl" latency="$bin/examples/latency"
for b in "$profd" "$profctl" "$latency"; do
    [ -x "$b" ] || die "$b is missing (run without --no-build)"
done

use_nice "$nice_level"

# Every process this script starts is one of its jobs until waited for
# (see start_work).
start_work overhead

# ----------------------------------------------------------------- helpers

# Seconds of CPU between two proc_cpu readings.
cpu_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }

# profd's memory in MiB: VmRSS VmHWM RssAnon RssFile VmPin, then the perf
# rings it has mapped (their size, and the part of them counted in VmRSS).
proc_mem() {
    local pid="$1"
    awk '/^(VmRSS|VmHWM|RssAnon|RssFile|VmPin):/ { v[$1] = $2 }
         END { printf "%.1f %.1f %.1f %.1f %.1f", v["VmRSS:"] / 1024, v["VmHWM:"] / 1024,
                      v["RssAnon:"] / 1024, v["RssFile:"] / 1024, v["VmPin:"] / 1024 }' "/proc/$pid/status"
    awk '/^[0-9a-f]+-[0-9a-f]+ / { ring = ($0 ~ /perf_event/) }
         ring && /^Size:/ { size += $2 }
         ring && /^Rss:/ { rss += $2 }
         END { printf " %.1f %.1f\n", size / 1024, rss / 1024 }' "/proc/$pid/smaps"
}

# Samples the daemon has attributed to a session, and discarded, so far.
attributed() { "$profctl" info | awk '/^ *samples:/ { print $2 }'; }
delivered() { "$profctl" info | awk '/^ *samples:/ { print $2, $4 }'; }

# window PID WARM: after WARM seconds, the CPU seconds of process PID over
# the next $steady_s, the window's length in seconds, and the samples profd
# attributed and discarded in it.
window() {
    local a0 d0 a1 d1 c0 c1 t0 t1
    sleep "$2"
    read -r a0 d0 < <(delivered)
    c0="$(proc_cpu "$1")" t0="$(now)"
    sleep "$steady_s"
    c1="$(proc_cpu "$1")" t1="$(now)"
    read -r a1 d1 < <(delivered)
    echo "$(cpu_s "$c0" "$c1") $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') $((a1 - a0)) $((d1 - d0))"
}

minmax() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f..%.2f", lo, hi }'; }
field() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) { print $(i + 1); exit } }' "$2"; }
json_number() { grep -o "\"$1\": [0-9.]*" "$2" | head -n 1 | awk '{ print $2 }'; }

# --------------------------------------------------------------- workloads

say "building workloads in $work"
"${CC:-gcc}" -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
    -pthread -Wall -o "$work/fixed_work" "$root/benches/workloads/fixed_work.c" || die "building fixed_work failed"
"${CC:-gcc}" -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
    -fno-ipa-icf -Wall -o "$work/many_stacks" "$root/benches/workloads/many_stacks.c" || die "building many_stacks failed"
fixed="$work/fixed_work"

# ------------------------------------------------------------------- profd

start_profd

echo "== profd overhead, side by side with perf"
echo "date:     $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine:  $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "kernel:   $(uname -r); perf $(perf version | awk '{ print $3 }'); perf_event_max_sample_rate $(cat /proc/sys/kernel/perf_event_max_sample_rate)"
echo "profd:    $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
echo "sampling: cpu-clock, $freq Hz on every CPU; nice $(nice), $(cut -d' ' -f1,3 /proc/$$/autogroup 2>/dev/null || echo 'no autogroup'); load average at start: $(loadavg)"

# ---------------------------------------------------------------- overhead

# One run of the target; its result line (rounds, wall_s, cpu_s and, given
# -p PID, the profiler's profiler_cpu_s over the work) lands in $work/result.
run_target() { "$fixed" -o "$work/result" "$@" "$rounds_per_thread"; }

# A run under perf record -a: started with its events off, turned on through
# its control fifo (so its start-up is not in the window), the target run
# (it reads perf's own CPU over its work), then perf stopped with SIGINT.
# -B: no build-id pass at the end (after the window, and slow on large files).
run_perf() {
    local ctl="$work/perf.ctl" ack="$work/perf.ack" ctl_fd ack_fd reply perf_pid status
    rm -f "$ctl" "$ack" "$work/perf.data"
    mkfifo "$ctl" "$ack"
    perf record -q -a "$@" -F "$freq" -B -D -1 --control "fifo:$ctl,$ack" -o "$work/perf.data" \
        >"$work/perf.log" 2>&1 &
    perf_pid=$!
    exec {ctl_fd}<>"$ctl" {ack_fd}<>"$ack"
    echo enable >&"$ctl_fd"
    read -r -t 30 reply <&"$ack_fd" || reply=''
    [ "$reply" = ack ] || die "perf record did not start: $(cat "$work/perf.log")"
    run_target -p "$perf_pid"
    kill -INT "$perf_pid"
    status=0
    wait "$perf_pid" || status=$?
    # perf record ends by raising the SIGINT it caught: 130 is a clean stop.
    [ "$status" = 0 ] || [ "$status" = 130 ] || die "perf record failed ($status): $(cat "$work/perf.log")"
    exec {ctl_fd}>&- {ack_fd}>&-
    samples="$(perf script -F comm -i "$work/perf.data" 2>/dev/null | awk '$1 == "fixed_work"' | wc -l)"
    rm -f "$work/perf.data"
    prof_cpu="$(field profiler_cpu_s "$work/result")"
}

# A run under profd: profctl run starts the target and streams 1 update/s
# until it exits; the target reads profd's CPU over its work.
run_profd() {
    local mode="$1"
    shift
    "$profctl" run --unwind "$mode" "$@" --freq "$freq" --interval 1 --format json -- \
        "$fixed" -o "$work/result" -p "$profd_pid" "$rounds_per_thread" 2>"$work/profd-$mode.json" ||
        die "profctl run --unwind $mode failed: $(cat "$work/profd-$mode.json")"
    samples="$(json_number attributed "$work/profd-$mode.json")"
    prof_cpu="$(field profiler_cpu_s "$work/result")"
}

run_config() {
    samples=- prof_cpu=-
    rm -f "$work/result"
    case "$1" in
    bare) run_target ;;
    perf-fp) run_perf -g ;;
    perf-dwarf) run_perf --call-graph dwarf ;;
    profd-fp) run_profd fp ;;
    profd-dwarf) run_profd dwarf --stack-bytes "$perf_stack_bytes" ;;
    esac
    [ -s "$work/result" ] || die "the target left no result in configuration $1"
    echo "$1 $2 $(field wall_s "$work/result") $(field cpu_s "$work/result") $prof_cpu $samples" >>"$work/runs"
}

# Median of column $2 (3 wall, 4 cpu, 5 profiler cpu, 6 samples) of configuration $1.
med() { awk -v c="$1" -v k="$2" '$1 == c && $k != "-" { print $k }' "$work/runs" | median; }
spread() { awk -v c="$1" -v k="$2" '$1 == c { print $k }' "$work/runs" | minmax; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f", (a / b - 1) * 100 }'; }

# ratio PROFD PERF COLUMN: profd's median slowdown over perf's, and the verdict.
ratio() {
    local base
    base="$(med bare "$3")"
    awk -v a="$(med "$1" "$3")" -v b="$(med "$2" "$3")" -v base="$base" \
        'BEGIN { sa = a / base - 1; sb = b / base - 1
                 if (sb <= 0.001) printf "n/a (perf slowdown %+.1f%% is within noise)", sb * 100
                 else printf "%.2f%s", sa / sb, (sa <= sb ? "  (target ≤ 1: met)" : "  (target ≤ 1: NOT met)") }'
}

# paired PROFD PERF COLUMN: the two slowdowns compared round by round, each
# against the same round's bare run (a slow stretch of the machine then
# weighs on both sides): profd's minus perf's, in points, as the median and
# range over the rounds, and the rounds in which profd's was at most perf's.
paired() {
    local diffs
    diffs="$(awk -v a="$1" -v b="$2" -v k="$3" '{ v[$1 "/" $2] = $k; r[$2] = 1 }
        END { for (i in r) if ((a "/" i) in v && (b "/" i) in v && ("bare/" i) in v)
                  print (v[a "/" i] - v[b "/" i]) / v["bare/" i] * 100 }' "$work/runs")"
    printf '%+.2f points (%s), profd ≤ perf in %d of %d rounds' "$(median <<<"$diffs")" \
        "$(minmax <<<"$diffs")" "$(awk '$1 <= 0' <<<"$diffs" | wc -l)" "$(grep -c . <<<"$diffs")"
}

# own PROFD PERF: the two profilers' own CPU over the target's work (medians)
# and their difference in points of the bare target's CPU time: what the
# profiler's extra runs take from a target that keeps every CPU busy. The
# kernel's sampling work is the same for both (same events, same samples).
own() {
    awk -v a="$(med "$1" 5)" -v b="$(med "$2" 5)" -v base="$(med bare 4)" \
        'BEGIN { printf "%.1f ms against %.1f ms a run, %+.2f points of the target CPU", a * 1e3, b * 1e3, (a - b) / base * 100 }'
}

phase_overhead() {
    local configs=(bare perf-fp perf-dwarf profd-fp profd-dwarf) r i c w u p n sw su pc bare_wall bare_cpu
    say "calibrating the fixed work (~$work_s s bare)"
    "$fixed" -o "$work/result" 50000
    rounds_per_thread="$(awk -v w="$(field wall_s "$work/result")" -v s="$work_s" 'BEGIN { printf "%d", 50000 * s / w }')"
    : >"$work/runs"
    for ((r = 0; r < rounds; r++)); do
        for ((i = 0; i < ${#configs[@]}; i++)); do
            c="${configs[$(((i + r) % ${#configs[@]}))]}"
            say "round $((r + 1))/$rounds: $c (load $(loadavg))"
            run_config "$c" "$((r + 1))"
        done
    done
    bare_wall="$(med bare 3)" bare_cpu="$(med bare 4)"

    echo
    echo "== overhead: fixed work ($rounds_per_thread rounds × 2 threads), $rounds rounds interleaved, medians"
    printf '%-12s %8s %13s %7s %13s %10s %10s %10s %10s %8s\n' \
        config "wall s" "(min..max)" "cpu s" "(min..max)" "wall slow%" "cpu slow%" "profiler s" "prof %core" samples
    for c in "${configs[@]}"; do
        w="$(med "$c" 3)" u="$(med "$c" 4)" p="$(med "$c" 5)" n="$(med "$c" 6)"
        if [ "$c" = bare ]; then sw=- su=- pc=-; else
            sw="$(pct "$w" "$bare_wall")" su="$(pct "$u" "$bare_cpu")"
            pc="$(awk -v p="$p" -v w="$w" 'BEGIN { printf "%.2f", p / w * 100 }')"
        fi
        if [ "$p" = nan ]; then p=-; else p="$(awk -v p="$p" 'BEGIN { printf "%.4f", p }')"; fi
        [ "$n" = nan ] && n=-
        printf '%-12s %8.3f %13s %7.3f %13s %10s %10s %10s %10s %8s\n' \
            "$c" "$w" "$(spread "$c" 3)" "$u" "$(spread "$c" 4)" "$sw" "$su" "$p" "$pc" "$n"
    done
    echo "(wall/cpu slow%: the target's median wall and CPU time against bare; profiler s: the CPU"
    echo " time of the perf record or profd process over the target's work; prof %core: that over"
    echo " the target's wall time; samples: the target's samples in perf.data or the profd session)"
    echo "ratio profd-fp / perf-fp slowdown:       wall $(ratio profd-fp perf-fp 3); cpu $(ratio profd-fp perf-fp 4)"
    echo "ratio profd-dwarf / perf-dwarf slowdown: wall $(ratio profd-dwarf perf-dwarf 3); cpu $(ratio profd-dwarf perf-dwarf 4)"
    echo "paired by round, profd-fp − perf-fp slowdown:       wall $(paired profd-fp perf-fp 3); cpu $(paired profd-fp perf-fp 4)"
    echo "paired by round, profd-dwarf − perf-dwarf slowdown: wall $(paired profd-dwarf perf-dwarf 3); cpu $(paired profd-dwarf perf-dwarf 4)"
    echo "own CPU, profd-fp against perf-fp:       $(own profd-fp perf-fp)"
    echo "own CPU, profd-dwarf against perf-dwarf: $(own profd-dwarf perf-dwarf)"
    echo "load average after the rounds: $(loadavg)"
}

# ----------------------------------------------------------- steady state

phase_steady() {
    local mode run_pid cpu_s win_s att disc cpu per rate drate full target rss hwm anon file pin ring ring_rss
    echo
    echo "== steady: profd with one session streaming 1 update/s, ${steady_s} s window after ${warm_s} s"
    printf '%-6s %9s %9s %11s %9s %10s %8s %8s %8s %8s %7s %7s\n' unwind "cpu %core" samples/s discarded/s \
        "µs/sample" "≤ at 1998/s" VmRSS VmHWM RssAnon RssFile VmPin rings
    for mode in fp dwarf; do
        "$profctl" run --unwind "$mode" --freq "$freq" --interval 1 --format json -- \
            "$fixed" -o "$work/result" -t "$(awk -v a="$warm_s" -v b="$steady_s" 'BEGIN { print a + b + 2 }')" \
            2>"$work/steady-$mode.json" &
        run_pid=$!
        read -r cpu_s win_s att disc < <(window "$profd_pid" "$warm_s")
        read -r rss hwm anon file pin ring ring_rss < <(proc_mem "$profd_pid")
        wait "$run_pid" || die "profctl run --unwind $mode failed: $(cat "$work/steady-$mode.json")"
        read -r cpu rate drate per full < <(awk -v s="$cpu_s" -v t="$win_s" -v n="$att" -v d="$disc" 'BEGIN {
            printf "%.2f %.0f %.0f %.1f %.2f\n", s / t * 100, n / t, d / t, s / n * 1e6, s / n * 1998 * 100 }')
        target=$([ "$mode" = fp ] && echo 1 || echo 3)
        printf '%-6s %9s %9s %11s %9s %10s %7sM %7sM %7sM %7sM %6sM %6sM  (target ≤ %s %%: %s)\n' \
            "$mode" "$cpu" "$rate" "$drate" "$per" "$full" "$rss" "$hwm" "$anon" "$file" "$pin" "$ring" "$target" \
            "$(awk -v c="$cpu" -v t="$target" 'BEGIN { print (c <= t ? "met" : "NOT met") }')"
    done
    echo "(cpu %core: profd's CPU time over the window; samples/s: the target's, attributed;"
    echo " discarded/s: other processes' samples the rings delivered (system-wide rings only);"
    echo " µs/sample: profd's CPU per attributed sample; ≤ at 1998/s: that cost at the 2 × 999"
    echo " samples/s the target gets on an idle machine, an upper bound as if all of profd's CPU"
    echo " grew with attributed samples; rings: perf ring buffers mapped into profd, of which"
    echo " ${ring_rss} MiB are counted in VmRSS on this kernel)"
    echo "load average: $(loadavg)"
}

# ------------------------------------------------------------------- costs

# How long a costs target lives: past its warm-up and window.
costs_life() { awk -v a="$costs_warm_s" -v b="$steady_s" 'BEGIN { print a + b + 5 }'; }

# profd's CPU a second over a steady window of one fp session: target
# `asleep` (the rings hold only other processes' samples) or `busy` (the
# fixed work), an update every $2 seconds.
costs_profd() {
    local target="$1" interval="$2" target_pid watch_pid cpu_s win_s att disc
    if [ "$target" = busy ]; then
        "$fixed" -o "$work/result" -t "$(costs_life)" &
    else
        sleep "$(costs_life)" &
    fi
    target_pid=$!
    "$profctl" attach "$target_pid" --unwind fp --freq "$freq" --interval "$interval" --format json \
        >/dev/null 2>"$work/profctl.err" &
    watch_pid=$!
    read -r cpu_s win_s att disc < <(window "$profd_pid" "$costs_warm_s")
    kill "$target_pid" 2>/dev/null || true
    wait "$target_pid" 2>/dev/null || true
    wait "$watch_pid" || die "profctl attach ($target, --interval $interval) failed: $(cat "$work/profctl.err")"
    awk -v s="$cpu_s" -v t="$win_s" -v n="$((att + disc))" -v what="profd, target $target, an update every $interval s" \
        'BEGIN { printf "%-44s %8.3f %10.0f\n", what, s / t * 1000, n / t }'
}

# perf record -a -g's own CPU a second over the same window on the fixed work.
costs_perf() {
    local target_pid perf_pid cpu_s win_s samples status=0
    "$fixed" -o "$work/result" -t "$(costs_life)" &
    target_pid=$!
    perf record -q -a -g -F "$freq" -B -o "$work/perf.data" >"$work/perf.log" 2>&1 &
    perf_pid=$!
    read -r cpu_s win_s _ < <(window "$perf_pid" "$costs_warm_s")
    kill -INT "$perf_pid"
    wait "$perf_pid" || status=$?
    [ "$status" = 0 ] || [ "$status" = 130 ] || die "perf record failed ($status): $(cat "$work/perf.log")"
    kill "$target_pid" 2>/dev/null || true
    wait "$target_pid" 2>/dev/null || true
    samples="$(perf script -F comm -i "$work/perf.data" 2>/dev/null | wc -l)"
    rm -f "$work/perf.data"
    awk -v s="$cpu_s" -v t="$win_s" -v n="$samples" \
        'BEGIN { printf "%-44s %8.3f %10s\n", "perf record -a -g, fixed work", s / t * 1000, "(" n " in all)" }'
}

phase_costs() {
    echo
    echo "== costs: what profd's fp CPU is made of, ${steady_s} s windows after ${costs_warm_s} s"
    printf '%-44s %8s %10s\n' "" "CPU ms/s" samples/s
    costs_profd asleep 10
    costs_profd asleep 1
    costs_profd busy 10
    costs_profd busy 1
    costs_perf
    echo "(CPU ms/s: the profiler's CPU time a second over the window; samples/s: those the"
    echo " rings delivered to profd, attributed and discarded; perf's line counts the samples"
    echo " of its whole run, warm-up included)"
    echo "load average: $(loadavg)"
}

# ----------------------------------------------------------------- latency

phase_latency() {
    local target_pid
    echo
    echo "== latency: Attach → first Watch update ($latency_runs runs, --unwind fp, 1 s interval)"
    "$fixed" -o /dev/null -t "$((latency_runs * 3 + 30))" &
    target_pid=$!
    sleep 0.3
    "$latency" --socket "$PROFD_SOCKET" --pid "$target_pid" --runs "$latency_runs" --interval-ms 1000 \
        --unwind fp --freq "$freq" | tee "$work/latency.txt"
    kill "$target_pid" 2>/dev/null || true
    wait "$target_pid" 2>/dev/null || true
    awk '/^summary/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
         printf "first update with samples: max %.1f ms = interval + %.1f ms (target ≤ interval + 300 ms: %s)\n",
                v["samples_max"], v["samples_max"] - v["interval_ms"],
                (v["samples_max"] - v["interval_ms"] <= 300 ? "met" : "NOT met") }' "$work/latency.txt"
}

# ------------------------------------------------------------------ memory

phase_memory() {
    local rss_s warm_s total_s next targets=() watchers=() i el start rss hwm steady_hwm anon file pin ring att ids id stacks=() w t
    warm_s="$(awk -v m="$rss_warmup" 'BEGIN { printf "%d", m * 60 }')"
    rss_s="$(awk -v m="$rss_minutes" 'BEGIN { printf "%d", m * 60 }')"
    total_s=$((warm_s + rss_s))
    echo
    echo "== memory: $rss_sessions sessions (--unwind $rss_unwind) on many_stacks targets of $rss_paths paths, watched at 1 update/s, ${warm_s} s of warm-up then ${rss_s} s measured"
    for ((i = 0; i < rss_sessions; i++)); do
        chrt --idle 0 "$work/many_stacks" "$((total_s + 120))" "$rss_paths" &
        targets+=("$!")
    done
    for ((i = 0; i < rss_sessions; i++)); do
        "$profctl" attach "${targets[$i]}" --unwind "$rss_unwind" --freq "$freq" --interval 1 --format json \
            >"$work/rss-$i.json" 2>"$work/rss-$i.err" &
        watchers+=("$!")
    done
    # VmHWM from here on: the earlier phases' peaks do not count.
    echo 5 >"/proc/$profd_pid/clear_refs"
    printf '%8s %8s %8s %8s %8s %7s %7s %11s  %s\n' elapsed VmRSS VmHWM RssAnon RssFile VmPin rings attributed load
    start="$(now)"
    : >"$work/rss"
    while :; do
        el="$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%d", b - a }')"
        read -r rss hwm anon file pin ring _ < <(proc_mem "$profd_pid")
        att="$(attributed)"
        [ "$el" -ge "$warm_s" ] && [ ! -s "$work/rss" ] && echo "-- measured from here"
        printf '%7ss %7sM %7sM %7sM %7sM %6sM %6sM %11s  %s\n' "$el" "$rss" "$hwm" "$anon" "$file" "$pin" "$ring" "$att" "$(loadavg)"
        [ "$el" -ge "$warm_s" ] && echo "$el $rss" >>"$work/rss"
        [ "$el" -ge "$total_s" ] && break
        # The next multiple of rss_every, or the window's start or end if sooner.
        next=$(((el / rss_every + 1) * rss_every))
        if [ "$el" -lt "$warm_s" ] && [ "$next" -gt "$warm_s" ]; then next="$warm_s"; fi
        if [ "$next" -gt "$total_s" ]; then next="$total_s"; fi
        sleep "$(awk -v a="$start" -v b="$(now)" -v n="$next" 'BEGIN { d = n - (b - a); print (d < 0.1 ? 0.1 : d) }')"
    done
    # The scenario's peak, before the exports below add their own.
    read -r _ steady_hwm _ < <(proc_mem "$profd_pid")
    # Unique stacks per session: the lines of its folded export (one per named stack).
    ids="$("$profctl" sessions | awk '$3 == "many_stacks" && $4 == "running" { print $1 }')"
    for id in $ids; do
        stacks+=("$("$profctl" export "$id" --format folded | wc -l)")
    done
    read -r rss hwm anon file pin ring _ < <(proc_mem "$profd_pid")
    echo "unique stacks per session: ${stacks[*]}"
    echo "after exporting them all (one at a time): VmRSS ${rss}M, VmHWM ${hwm}M (${steady_hwm}M before), rings ${ring}M (not in VmRSS on this kernel)"
    for w in "${watchers[@]}"; do kill -INT "$w" 2>/dev/null || true; done
    for w in "${watchers[@]}"; do wait "$w" 2>/dev/null || true; done
    for t in "${targets[@]}"; do kill "$t" 2>/dev/null || true; done
    for t in "${targets[@]}"; do wait "$t" 2>/dev/null || true; done
    # Flat: every reading of the measured minutes within 5 % of the first.
    awk -v hwm="$steady_hwm" -v min_stacks="$(printf '%s\n' "${stacks[@]}" | sort -n | head -n 1)" '
        NR == 1 { first = $2; lo = $2; hi = $2 }
        { if ($2 < lo) lo = $2; if ($2 > hi) hi = $2; last = $2 }
        END { flat = hi - lo <= 0.05 * first
              verdict = (min_stacks < 10000 ? "not shown: fewer than 10000 stacks a session" : (hwm > 64 || !flat) ? "NOT met" : "met")
              printf "VmHWM %.1f MiB over the whole scenario, before the exports (≤ 64: %s); ", hwm, (hwm > 64 ? "no" : "yes")
              printf "measured minutes: VmRSS %.1f → %.1f MiB, range %.1f..%.1f (%.1f MiB, %.1f %% of the first; flat, within 5 %%: %s); ",
                     first, last, lo, hi, hi - lo, 100 * (hi - lo) / first, flat ? "yes" : "no"
              printf "fewest unique stacks in a session: %d (target ≤ 64 MiB, flat, with ≥ 10000: %s)\n", min_stacks, verdict }' "$work/rss"
    echo "load average: $(loadavg) (the $rss_sessions SCHED_IDLE targets count in it)"
}

if wants overhead; then phase_overhead; fi
if wants steady; then phase_steady; fi
if wants costs; then phase_costs; fi
if wants latency; then phase_latency; fi
if wants memory; then phase_memory; fi
