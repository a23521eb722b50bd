#!/usr/bin/env bash
# What off-CPU profiling costs at high context-switch rates, profd side by
# side with perf on the same load.
#
# The load: tests/workloads/offcpu.c's ping-pong, two threads on one CPU
# bouncing a byte over two pipes, each blocking on its read once a round trip (two
# switches out a round trip), paced to a target rate of switches a second
# (--rates; 0 = as fast as they go) by short sleeps, each one more switch,
# so that the switches come evenly, not in bursts. Each rate is run
#     bare
#     under perf record -e sched:sched_switch -g            (perf)
#     under profctl run --mode off-cpu --unwind fp           (profd-fp)
#     under profctl run --mode off-cpu --unwind dwarf        (profd-dwarf)
# for --seconds each, the configurations interleaved over --rounds rounds,
# and their medians compared:
#   rate/s       the switches a second the target achieved (below the target
#                rate: the profiler slowed it down; at 0, the slowdown is the
#                drop from bare)
#   µs/trip      the target's CPU time per round trip (a profiler that takes
#                a stack at each switch does that work in the target's
#                context), and its rise against bare
#   prof s       the profiler's own CPU time over the run: perf record's
#                process, or profd's plus profctl's
#   lost         what the profiler lost: perf's lost samples (`perf report
#                --stats`, sched:sched_switch's LOST_SAMPLES); profd's
#                Totals.lost + TimeTotals.unpaired (switches that could not
#                be paired: lost, or the threads' first switch in)
#   seen %       switches recorded against the target's switches (2 a round
#                trip, 1 a pacing sleep): perf's samples, profd's
#                TimeTotals.waits
#   on %         profd: TimeTotals.on_cpu_ns against the target's CPU time
#                as the kernel counts it (the workload's cpu_total_s)
#   unknown %    profd: TimeTotals.unknown_ns (time no record tells, records
#                having been lost) against on + off + unknown time
# and profd's peak resident memory (VmHWM) at the end.
#
# Usage: benches/offcpu.sh [--rates "50000 200000 0"] [--seconds S] [--rounds N]
#                          [--configs LIST] [--nice N] [--no-build] [--bin DIR] [--keep]
#   --rates LIST  target rates in switches a second, 0 = unpaced (default
#                 "50000 200000 0")
#   --seconds S   length of each run (default 5)
#   --rounds N    rounds (default 3)
#   --configs L   configurations to run, comma-separated (default
#                 bare,perf,profd-fp,profd-dwarf; bare is always run)
#   --nice N      run everything measured at this nice level (all
#                 configurations alike)
#   --no-build    use the release binaries already built
#   --bin DIR     use the profd and profctl in DIR (implies --no-build)
#   --keep        keep the work directory (logs, profiles)
#
# Needs root, perf (Debian package linux-perf), gcc, GNU time (/usr/bin/time)
# and cargo. Builds the release binaries of profd and profctl, starts its own
# profd on a private socket with --no-persist, and stops every process it
# started when it exits.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/benches/lib.sh"
rates="50000 200000 0"
seconds=5
rounds=3
nice_level=''
configs_arg=bare,perf,profd-fp,profd-dwarf
bin="${CARGO_TARGET_DIR:-$root/target}/release"
build=1
keep=0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
die() { echo "offcpu: $*" >&2; exit 1; }
say() { echo "offcpu: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --rates) rates="${2:?--rates needs a list, e.g. \"50000 200000 0\"}"; shift ;;
    --seconds) seconds="${2:?--seconds needs a number}"; shift ;;
    --rounds) rounds="${2:?--rounds needs a number}"; shift ;;
    --configs) configs_arg="${2:?--configs needs a list, e.g. bare,perf}"; shift ;;
    --nice) nice_level="${2:?--nice needs a level, -20..19}"; shift ;;
    --no-build) build=0 ;;
    --bin) bin="${2:?--bin needs a directory}"; build=0; shift ;;
    --keep) keep=1 ;;
    -h | --help) usage ;;
    *) echo "offcpu: unknown option '$1'" >&2; usage ;;
    esac
    shift
done
for r in $rates; do
    [[ "$r" =~ ^[0-9]+$ ]] || die "--rates takes whole numbers of switches a second (0 = unpaced), not '$r'"
done
[[ "$seconds" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--seconds must be a number of seconds, not '$seconds'"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a whole number ≥ 1, not '$rounds'"
[[ "$configs_arg" =~ ^(bare|perf|profd-fp|profd-dwarf)(,(bare|perf|profd-fp|profd-dwarf))*$ ]] ||
    die "--configs takes configurations from bare, perf, profd-fp, profd-dwarf (comma-separated), not '$configs_arg'"
configs=(bare)
for c in perf profd-fp profd-dwarf; do
    if [[ ",$configs_arg," == *",$c,"* ]]; then configs+=("$c"); fi
done
with_profd=0
if [[ "$configs_arg" == *profd* ]]; then with_profd=1; fi
[[ -z "$nice_level" || "$nice_level" =~ ^-?[0-9]+$ ]] || die "--nice must be a whole number, -20..19, not '$nice_level'"

[ "$(id -u)" = 0 ] || die "run as root: profd and perf open tracepoint and switch events"
need_perf
command -v "${CC:-gcc}" >/dev/null || die "${CC:-gcc} is missing (apt-get install gcc)"
[ -x /usr/bin/time ] || die "GNU time is missing (apt-get install time)"

profd="$bin/profd" profctl="$bin/profctl"
if [ "$with_profd" = 1 ]; then
    if [ "$build" = 1 ]; then
        command -v cargo >/dev/null || die "cargo is missing"
        say "building release binaries"
        (cd "$root" && cargo build --release -q -p profd -p profctl --bins) || die "the release build failed"
    fi
    for b in "$profd" "$profctl"; do
        [ -x "$b" ] || die "$b is missing (run without --no-build)"
    done
fi

use_nice "$nice_level"
start_work offcpu

"${CC:-gcc}" -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
    -pthread -Wall -o "$work/offcpu" "$root/tests/workloads/offcpu.c" || die "building offcpu failed"
wl="$work/offcpu"

if [ "$with_profd" = 1 ]; then start_profd; fi

field() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }
json_number() { grep -o "\"$1\": [0-9.]*" "$2" | head -n 1 | awk '{ print $2 }'; }
# User + system seconds GNU time wrote (-f '%U %S'), less the target's own CPU.
own_cpu() { awk -v t="$2" 'END { printf "%.4f", $1 + $2 - t }' "$1"; }

echo "== off-CPU profiling at high switch rates, side by side with perf"
echo "date:     $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine:  $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "kernel:   $(uname -r); perf $(perf version | awk '{ print $3 }')"
echo "profd:    $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
echo "runs:     ${seconds} s each, $rounds rounds, rates (switches/s, 0 = unpaced): $rates"
echo "load average before: $(loadavg)"

# run CONFIG RATE ROUND: one run; appends
#   config rate round achieved µs/trip profiler_s lost seen%
# to $work/runs.
run() {
    local c="$1" rate="$2" round="$3" prof=- lost=- seen=- on=- unknown=- switches c0 c1 samples
    local err="$work/wl.err"
    rm -f "$err" "$work/time" "$work/perf.data" "$work/p.json"
    case "$c" in
    bare)
        "$wl" pingpong "$seconds" "$rate" 2>"$err" || die "the ping-pong failed: $(cat "$err")"
        ;;
    perf)
        /usr/bin/time -f '%U %S' -o "$work/time" \
            perf record -q -e sched:sched_switch -g -o "$work/perf.data" -- \
            "$wl" pingpong "$seconds" "$rate" 2>"$err" >/dev/null ||
            die "perf record failed: $(cat "$err")"
        prof="$(own_cpu "$work/time" "$(field cpu_s "$err")")"
        lost="$(perf report -i "$work/perf.data" --stats 2>/dev/null |
            awk '/sched:sched_switch stats:/ { s = 1 } s && /LOST_SAMPLES events:/ { n = $3 } END { print n + 0 }')"
        samples="$(perf report -i "$work/perf.data" --stats 2>/dev/null |
            awk '/sched:sched_switch stats:/ { s = 1 } s && /SAMPLE events:/ && !/LOST/ { print $3; exit }')"
        seen="$samples"
        ;;
    profd-fp | profd-dwarf)
        c0="$(proc_cpu "$profd_pid")"
        /usr/bin/time -f '%U %S' -o "$work/time" \
            "$profctl" run --mode off-cpu --unwind "${c#profd-}" --format json -- \
            "$wl" pingpong "$seconds" "$rate" 2>"$err" ||
            die "profctl run failed: $(cat "$err")"
        # run writes its JSON to stderr, beside the workload's figures.
        cp "$err" "$work/p.json"
        c1="$(proc_cpu "$profd_pid")"
        prof="$(awk -v a="$c0" -v b="$c1" -v o="$(own_cpu "$work/time" "$(field cpu_s "$err")")" \
            'BEGIN { printf "%.4f", b - a + o }')"
        lost=$(($(json_number lost "$work/p.json") + $(json_number unpaired "$work/p.json")))
        seen="$(json_number waits "$work/p.json")"
        on="$(awk -v n="$(json_number on_cpu_ns "$work/p.json")" -v c="$(field cpu_total_s "$err")" \
            'BEGIN { printf "%.1f", n / (c * 1e9) * 100 }')"
        unknown="$(awk -v u="$(json_number unknown_ns "$work/p.json")" \
            -v t="$(($(json_number on_cpu_ns "$work/p.json") + $(json_number off_cpu_ns "$work/p.json")))" \
            'BEGIN { printf "%.1f", u / (t + u) * 100 }')"
        ;;
    esac
    switches="$(field switches "$err")"
    [ "$seen" != - ] && seen="$(awk -v s="$seen" -v n="$switches" 'BEGIN { printf "%.1f", s / n * 100 }')"
    echo "$c $rate $round $(field switches_per_s "$err") $(field cpu_us_per_round_trip "$err") $prof $lost $seen $on $unknown" >>"$work/runs"
}

: >"$work/runs"
for ((round = 1; round <= rounds; round++)); do
    for rate in $rates; do
        # The order rotates each round, so that no configuration always
        # follows the same one.
        for ((i = 0; i < ${#configs[@]}; i++)); do
            c="${configs[$(((i + round - 1) % ${#configs[@]}))]}"
            say "round $round, rate $rate: $c"
            run "$c" "$rate" "$round"
        done
    done
done

# med CONFIG RATE COLUMN: the median over the rounds.
med() { awk -v c="$1" -v r="$2" -v k="$3" '$1 == c && $2 == r && $k != "-" { print $k }' "$work/runs" | median; }
for rate in $rates; do
    echo
    echo "== rate $([ "$rate" = 0 ] && echo "unpaced" || echo "$rate switches/s") (medians of $rounds rounds)"
    printf '%-12s %10s %8s %9s %8s %8s %9s %7s %6s %9s\n' config rate/s "vs bare" µs/trip "vs bare" "prof s" lost "seen %" "on %" "unknown %"
    base_rate="$(med bare "$rate" 4)" base_us="$(med bare "$rate" 5)"
    for c in "${configs[@]}"; do
        r="$(med "$c" "$rate" 4)" u="$(med "$c" "$rate" 5)" p="$(med "$c" "$rate" 6)" l="$(med "$c" "$rate" 7)" s="$(med "$c" "$rate" 8)"
        o="$(med "$c" "$rate" 9)" k="$(med "$c" "$rate" 10)"
        printf '%-12s %10.0f %8s %9.2f %8s %8s %9s %7s %6s %9s\n' "$c" "$r" \
            "$(awk -v a="$r" -v b="$base_rate" 'BEGIN { printf "%.2f", a / b }')" "$u" \
            "$(awk -v a="$u" -v b="$base_us" 'BEGIN { printf "%.2f", a / b }')" \
            "$([ "$p" = nan ] && echo - || echo "$p")" "$([ "$l" = nan ] && echo - || echo "$l")" \
            "$([ "$s" = nan ] && echo - || echo "$s")" "$([ "$o" = nan ] && echo - || echo "$o")" \
            "$([ "$k" = nan ] && echo - || echo "$k")"
    done
    for c in profd-fp profd-dwarf; do
        [[ " ${configs[*]} " == *" $c "* && " ${configs[*]} " == *" perf "* ]] || continue
        awk -v c="$c" -v a="$(med "$c" "$rate" 6)" -v b="$(med perf "$rate" 6)" \
            -v ua="$(med "$c" "$rate" 5)" -v ub="$(med perf "$rate" 5)" -v u0="$base_us" \
            'BEGIN { printf "%s / perf: profiler CPU %.2f; target CPU per round trip added %.2f\n",
                     c, a / b, (ub - u0 > 0 ? (ua - u0) / (ub - u0) : 0) }'
    done
done
echo
echo "(rate/s: switches a second the target achieved; µs/trip: its CPU time per round trip;"
echo " prof s: the profiler's own CPU time over the run; lost: perf's lost samples, profd's"
echo " lost + unpaired; seen %: switches recorded against the target's; on %: profd's on-CPU"
echo " time against the target's CPU time; unknown %: profd's time not known, of all counted)"
if [ "$with_profd" = 1 ]; then
    echo "profd peak resident memory: $(awk '/^VmHWM/ { print $2, $3 }' "/proc/$profd_pid/status")"
fi
echo "load average after: $(loadavg)"
echo "every run (config rate round rate/s µs/trip prof_s lost seen% on% unknown%):"
sort -k2,2n -k1,1 -k3,3n "$work/runs" | sed 's/^/  /'
