#!/usr/bin/env bash
# What continuous profiling (profd --continuous) costs, measured side by side
# with perf in one run, on a load that keeps both CPUs busy: xz compressing
# in a loop (a distribution binary, no frame pointers), fixed_work built
# without frame pointers and fixed_work built with them (two threads each).
#
#  cpu      profd --continuous at 19 Hz (the default) and at 99 Hz, each
#           against perf record -a -g and perf record -a --call-graph dwarf
#           at the same frequency on the same load: the profiler's own CPU
#           over --cpu-seconds after a warm-up, as % of one core, and what
#           it writes a second (profd: its window files; perf: perf.data).
#           The six configurations are interleaved over --rounds rounds (the
#           order rotates each round), one profiler at a time; medians and
#           the ratios profd / perf.
#  disk     profd at its default settings (19 Hz, 10 s windows), then at
#           99 Hz, on the same load for --disk-windows windows: the bytes of
#           each window file in <state>/windows (the first, partial, window
#           and the last left out), its services, processes and unique
#           stacks; per window and per host-hour.
#  latency  profd at its default settings on the same load: for
#           --latency-windows windows, from the window's nominal end (a
#           multiple of 10 s of wall-clock time) to the moment
#           `profctl query --from END --to END` answers with it (polled
#           every 10 ms); also when the window was cut (its end_unix_ns)
#           and when its file was written.
#  memory   500 live processes (benches/workloads/idlers.c: each busy
#           0.5 ms a second) and two many_stacks processes of --rss-paths
#           (2^16) call paths each, profd --continuous at --rss-freq (4999 Hz) with
#           --rss-window (30 s) windows, so that each window holds
#           100 000 unique stacks or more: two windows (at least 180 s)
#           of warm-up, then
#           --rss-minutes (30) measured, profd's memory read every 30 s
#           (its peak, VmHWM, over the measured minutes); then
#           every window's services, processes and unique stacks read back
#           from its file.
#
# Usage: benches/continuous.sh [--quick] [--only PHASES] [--rounds N] [--cpu-seconds S]
#                              [--disk-windows N] [--latency-windows N]
#                              [--rss-minutes M] [--rss-procs N] [--rss-freq HZ]
#                              [--rss-window S] [--rss-paths N] [--nice N]
#                              [--no-build] [--keep]
#   --quick               short runs for a smoke test (1 round of 10 s, 4 disk
#                         windows, 3 latency windows, 2 minutes of memory
#                         with 10 s windows)
#   --only PHASES         run only these phases, comma-separated (cpu, disk,
#                         latency, memory; default all, in that order)
#   --rounds N            cpu rounds (default 3)
#   --cpu-seconds S       seconds each cpu configuration is measured (default
#                         30: three 10 s windows)
#   --disk-windows N      whole windows measured at each frequency (default 12)
#   --latency-windows N   windows timed (default 10)
#   --rss-minutes M       the memory scenario's measured minutes (default 30;
#                         fractions allowed)
#   --rss-procs N         live processes of the memory scenario (default 500)
#   --rss-freq HZ         its sampling frequency (default 4999)
#   --rss-window S        its window span in seconds (default 30)
#   --rss-paths N         call paths of each many_stacks process (default
#                         65536, at most 131072)
#   --nice N              run everything measured (load, perf, profd, profctl)
#                         at this nice level, as benches/overhead.sh does
#   --no-build            use the release binaries already built
#   --keep                keep the work directory (logs, windows, figures)
#
# PROFD_LOG_LEVEL sets the log level of the profd it starts (default warn;
# debug logs each window cut, with the time it took, in profd-*.log).
#
# Needs root, perf (Debian package linux-perf), gcc, xz, python3 (to read
# the window files: gzip'd protobuf, decoded by hand) and cargo. Builds the
# release binaries (cargo build --release -p profd -p profctl), starts its
# own profd on a private socket and a private state directory for each
# measurement, and stops every process it started when it exits.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/benches/lib.sh"
phases=cpu,disk,latency,memory
rounds=3
cpu_s=30
cpu_warm_s=15   # profd: past its first window cut before the measurement
perf_warm_s=3   # perf record: past its start (synthesizing the processes)
freqs=(19 99)
disk_windows=12
latency_windows=10
rss_minutes=30
rss_procs=500
rss_freq=4999
rss_window=30
rss_paths=65536
rss_every=30
nice_level=''
build=1
keep=0
quick=0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
die() { echo "continuous: $*" >&2; exit 1; }
say() { echo "continuous: $*" >&2; }

given=()
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --only) phases="${2:?--only needs phases, e.g. cpu,disk}"; shift ;;
    --rounds) given+=("rounds=${2:?--rounds needs a number}"); shift ;;
    --cpu-seconds) given+=("cpu_s=${2:?--cpu-seconds needs a number}"); shift ;;
    --disk-windows) given+=("disk_windows=${2:?--disk-windows needs a number}"); shift ;;
    --latency-windows) given+=("latency_windows=${2:?--latency-windows needs a number}"); shift ;;
    --rss-minutes) given+=("rss_minutes=${2:?--rss-minutes needs a number}"); shift ;;
    --rss-procs) given+=("rss_procs=${2:?--rss-procs needs a number}"); shift ;;
    --rss-freq) given+=("rss_freq=${2:?--rss-freq needs a frequency}"); shift ;;
    --rss-window) given+=("rss_window=${2:?--rss-window needs seconds}"); shift ;;
    --rss-paths) given+=("rss_paths=${2:?--rss-paths needs a number}"); shift ;;
    --nice) nice_level="${2:?--nice needs a level, -20..19}"; shift ;;
    --no-build) build=0 ;;
    --keep) keep=1 ;;
    -h | --help) usage ;;
    *) echo "continuous: unknown option '$1'" >&2; usage ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    rounds=1 cpu_s=10 cpu_warm_s=11 disk_windows=4 latency_windows=3 rss_minutes=2 rss_window=10 rss_every=10
fi
for g in "${given[@]}"; do
    printf -v "${g%%=*}" '%s' "${g#*=}"
done
whole() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a whole number ≥ 1, not '$2'"; }
whole --rounds "$rounds"
whole --cpu-seconds "$cpu_s"
whole --disk-windows "$disk_windows"
whole --latency-windows "$latency_windows"
whole --rss-procs "$rss_procs"
whole --rss-freq "$rss_freq"
whole --rss-window "$rss_window"
whole --rss-paths "$rss_paths"
[ "$rss_paths" -le 131072 ] || die "--rss-paths must be at most 131072 (2^17: many_stacks's call paths), not $rss_paths"
if ! [[ "$rss_minutes" =~ ^[0-9]*\.?[0-9]+$ ]] || ! awk -v m="$rss_minutes" 'BEGIN { exit !(m > 0) }'; then
    die "--rss-minutes must be a number of minutes above 0, not '$rss_minutes'"
fi
[[ "$phases" =~ ^(cpu|disk|latency|memory)(,(cpu|disk|latency|memory))*$ ]] ||
    die "--only takes phases from cpu, disk, latency, memory (comma-separated), not '$phases'"
[[ -z "$nice_level" || "$nice_level" =~ ^-?[0-9]+$ ]] || die "--nice must be a whole number, -20..19, not '$nice_level'"
wants() { [[ ",$phases," == *",$1,"* ]]; }

# ------------------------------------------------------------------ checks

[ "$(id -u)" = 0 ] || die "run as root: perf -a and continuous profiling sample the whole system"
need_perf
command -v "${CC:-gcc}" >/dev/null || die "${CC:-gcc} is missing (apt-get install gcc)"
command -v xz >/dev/null || die "xz is missing (apt-get install xz-utils)"
command -v python3 >/dev/null || die "python3 is missing (apt-get install python3): it reads the window files"
command -v cargo >/dev/null || die "cargo is missing"
max_rate="$(cat /proc/sys/kernel/perf_event_max_sample_rate)"
if wants memory && [ "$rss_freq" -gt "$max_rate" ]; then
    die "--rss-freq $rss_freq is above kernel.perf_event_max_sample_rate ($max_rate): give a lower one"
fi

bin="${CARGO_TARGET_DIR:-$root/target}/release"
if [ "$build" = 1 ]; then
    say "building release binaries"
    (cd "$root" && cargo build --release -q -p profd -p profctl) || die "the release build failed"
fi
profd="$bin/profd" profctl="$bin/profctl"
for b in "$profd" "$profctl"; do
    [ -x "$b" ] || die "$b is missing (run without --no-build)"
done

use_nice "$nice_level"

# Every process this script starts is one of its jobs until waited for (see
# start_work). A sampling rate the kernel lowered during the run (perf:
# "interrupt took too long") is given back.
before_cleanup() {
    if [ "$(cat /proc/sys/kernel/perf_event_max_sample_rate)" != "$max_rate" ]; then
        say "the kernel lowered perf_event_max_sample_rate to $(cat /proc/sys/kernel/perf_event_max_sample_rate) during the run; set back to $max_rate"
        echo "$max_rate" >/proc/sys/kernel/perf_event_max_sample_rate || true
    fi
}
start_work continuous

# ----------------------------------------------------------------- helpers

minmax() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%s..%s", lo, hi; else printf "-" }'; }
# Sleep until Unix time $1 (fractions allowed).
sleep_until() { sleep "$(awk -v t="$1" -v n="$(now)" 'BEGIN { d = t - n; print (d > 0 ? d : 0) }')"; }

# A process's memory in MiB: VmRSS VmHWM RssAnon RssFile.
proc_mem() {
    awk '/^(VmRSS|VmHWM|RssAnon|RssFile):/ { v[$1] = $2 }
         END { printf "%.1f %.1f %.1f %.1f\n", v["VmRSS:"] / 1024, v["VmHWM:"] / 1024,
                      v["RssAnon:"] / 1024, v["RssFile:"] / 1024 }' "/proc/$1/status"
}

# What a window file holds, one line a file:
#   FILE BYTES START_NS END_NS SERVICES PROCESSES THREADS STACKS ATTRIBUTED DISCARDED LOST THROTTLED
# decoded from its gzip'd profd.v1.Window (field numbers of
# proto/profd/v1/profd.proto) without the protobuf library: STACKS counts
# the ServiceWindow.stacks entries, that is the unique stacks (per thread)
# the window holds.
cat >"$work/window_facts.py" <<'EOF'
import gzip, os, sys

def fields(b):
    i, n = 0, len(b)
    while i < n:
        key, i = varint(b, i)
        f, t = key >> 3, key & 7
        if t == 0:
            v, i = varint(b, i)
        elif t == 1:
            v, i = b[i:i + 8], i + 8
        elif t == 2:
            ln, i = varint(b, i)
            v, i = b[i:i + ln], i + ln
        elif t == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % t)
        yield f, v

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i

for path in sys.argv[1:]:
    try:
        raw = gzip.open(path).read()
    except (OSError, EOFError):
        continue
    start = end = services = processes = threads = stacks = 0
    totals = {}
    for f, v in fields(raw):
        if f == 2:
            start = v
        elif f == 3:
            end = v
        elif f == 8:
            totals = dict((k, x) for k, x in fields(v) if isinstance(x, int))
        elif f == 9:
            services += 1
            for g, _ in fields(v):
                processes += g == 4
                threads += g == 5
                stacks += g == 7
    print(os.path.basename(path), os.path.getsize(path), start, end, services, processes, threads, stacks,
          totals.get(1, 0), totals.get(2, 0), totals.get(3, 0), totals.get(7, 0))
EOF
window_facts() { [ $# -eq 0 ] || python3 "$work/window_facts.py" "$@"; }

# The window files of a state directory that ended in [FROM, TO) (Unix
# seconds; the file names are START_NS-END_NS-ID.window.gz).
windows_between() {
    local dir="$1/windows" f e
    [ -d "$dir" ] || return 0
    for f in "$dir"/*.window.gz; do
        [ -e "$f" ] || continue
        e="$(basename "$f" | cut -d- -f2)"
        awk -v e="$e" -v a="$2" -v b="$3" 'BEGIN { exit !(e / 1e9 >= a && e / 1e9 < b) }' && echo "$f"
    done
    return 0
}

# ------------------------------------------------------------- workloads

say "building workloads in $work"
cflags=(-O2 -g -pthread -Wall)
"${CC:-gcc}" "${cflags[@]}" -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
    -o "$work/fixed_work_fp" "$root/benches/workloads/fixed_work.c" || die "building fixed_work (fp) failed"
"${CC:-gcc}" "${cflags[@]}" -fomit-frame-pointer \
    -o "$work/fixed_work_nofp" "$root/benches/workloads/fixed_work.c" || die "building fixed_work (no fp) failed"
"${CC:-gcc}" -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
    -fno-ipa-icf -Wall -DLEVELS=17 -o "$work/many_stacks" "$root/benches/workloads/many_stacks.c" ||
    die "building many_stacks failed"
"${CC:-gcc}" -O2 -g -fomit-frame-pointer -Wall -o "$work/idlers" "$root/benches/workloads/idlers.c" ||
    die "building idlers failed"
# xz's input: 32 MiB of the machine's own programs (compresses at a few MiB/s).
find /usr/bin /usr/lib -type f -size +64k 2>/dev/null | sort | head -n 400 | xargs cat 2>/dev/null |
    head -c $((32 << 20)) >"$work/xz.in" || true
[ "$(stat -c %s "$work/xz.in")" -gt $((1 << 20)) ] || die "could not gather xz's input from /usr/bin and /usr/lib"

load_pids=()
# The load: both CPUs busy, with and without frame pointers.
start_load() {
    [ ${#load_pids[@]} -eq 0 ] || return 0
    (while :; do xz -T1 -6 -c "$work/xz.in" >/dev/null; done) &
    load_pids+=("$!")
    "$work/fixed_work_nofp" -o /dev/null -t 86400 &
    load_pids+=("$!")
    "$work/fixed_work_fp" -o /dev/null -t 86400 &
    load_pids+=("$!")
    sleep 1
}
stop_load() {
    local p kids
    for p in "${load_pids[@]}"; do
        kids="$(pgrep -P "$p" || true)"
        kill -TERM "$p" 2>/dev/null || true
        for k in $kids; do kill -TERM "$k" 2>/dev/null || true; done
    done
    for p in "${load_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    load_pids=()
}
load_text="xz -T1 -6 in a loop (no frame pointers), fixed_work -O2 -fomit-frame-pointer (2 threads), fixed_work with frame pointers (2 threads)"

# ------------------------------------------------------------------- profd

profd_pid='' state=''
# start_profd NAME FREQ WINDOW: a profd --continuous of our own, on a
# private socket and a fresh state directory.
start_profd() {
    state="$work/state-$1"
    rm -rf "$state"
    export PROFD_SOCKET="$work/$1.sock"
    "$profd" --socket "$PROFD_SOCKET" --state-dir "$state" --log-level "${PROFD_LOG_LEVEL:-warn}" \
        --continuous --continuous-freq "$2" --continuous-window "$3" 2>"$work/profd-$1.log" &
    profd_pid=$!
    for _ in $(seq 100); do
        "$profctl" info >/dev/null 2>&1 && break
        kill -0 "$profd_pid" 2>/dev/null || die "profd exited at start: $(cat "$work/profd-$1.log")"
        sleep 0.1
    done
    "$profctl" info >/dev/null 2>&1 || die "profd does not answer on $PROFD_SOCKET: $(cat "$work/profd-$1.log")"
    "$profctl" info | grep -qi 'continuous.*on' ||
        die "profd --continuous does not say continuous profiling is on: $("$profctl" info | grep -i continuous || echo 'no continuous line in profctl info')"
}
stop_profd() {
    kill -TERM "$profd_pid" 2>/dev/null || true
    wait "$profd_pid" 2>/dev/null || true
    profd_pid=''
}

echo "== profd continuous profiling: cost, memory, disk and latency"
echo "date:     $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine:  $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "kernel:   $(uname -r); perf $(perf version | awk '{ print $3 }'); perf_event_max_sample_rate $max_rate"
echo "profd:    $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
echo "load:     $load_text"
echo "nice $(nice), $(cut -d' ' -f1,3 /proc/$$/autogroup 2>/dev/null || echo 'no autogroup'); load average at start: $(loadavg); processes: $(ls -d /proc/[0-9]* | wc -l)"

# --------------------------------------------------------------------- cpu

# cpu_profd FREQ ROUND: profd --continuous at FREQ, 10 s windows: its CPU
# over $cpu_s after $cpu_warm_s, and the bytes of the windows that ended
# in the measurement, their samples.
cpu_profd() {
    local f="$1" r="$2" c0 c1 t0 t1 files=() bytes att disc lost
    start_profd "cpu-$f-$r" "$f" 10
    sleep "$cpu_warm_s"
    c0="$(proc_cpu "$profd_pid")" t0="$(now)"
    sleep "$cpu_s"
    c1="$(proc_cpu "$profd_pid")" t1="$(now)"
    read -r rss _ < <(proc_mem "$profd_pid")
    stop_profd
    mapfile -t files < <(windows_between "$state" "$t0" "$t1")
    read -r bytes att disc lost < <(window_facts "${files[@]}" |
        awk '{ b += $2; a += $9; d += $10; l += $11 } END { printf "%d %d %d %d\n", b, a, d, l }')
    # Windows ending in the measurement cover about its length.
    awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v b="$bytes" -v n="${#files[@]}" -v a="$att" \
        -v d="$disc" -v l="$lost" -v rss="$rss" -v cfg="profd-$f" -v r="$r" \
        'BEGIN { t = t1 - t0; printf "%s %s %.4f %.0f %.1f %s %.1f\n", cfg, r, (c1 - c0) / t * 100,
                 (n ? b / (n * 10) : 0), (a + d) / t, l, rss }' >>"$work/cpu"
}

# cpu_perf MODE FREQ ROUND: perf record -a MODE at FREQ: its CPU over
# $cpu_s after $perf_warm_s, what its perf.data grew by, and its samples.
cpu_perf() {
    local mode="$1" f="$2" r="$3" c0 c1 t0 t1 s0 s1 pid status=0 samples per_s name rss
    name="perf-$([ "$mode" = -g ] && echo fp || echo dwarf)-$f"
    rm -f "$work/perf.data"
    # shellcheck disable=SC2086
    perf record -q -a $mode -F "$f" -B -o "$work/perf.data" >"$work/perf.log" 2>&1 &
    pid=$!
    sleep "$perf_warm_s"
    kill -0 "$pid" 2>/dev/null || die "perf record $mode -F $f exited: $(cat "$work/perf.log")"
    c0="$(proc_cpu "$pid")" t0="$(now)" s0="$(stat -c %s "$work/perf.data")"
    sleep "$cpu_s"
    c1="$(proc_cpu "$pid")" t1="$(now)"
    read -r rss _ < <(proc_mem "$pid")
    kill -INT "$pid"
    wait "$pid" || status=$?
    [ "$status" = 0 ] || [ "$status" = 130 ] || die "perf record failed ($status): $(cat "$work/perf.log")"
    # perf writes its rings out when they are half full, so the file grows
    # in steps: what it writes a second is its bytes a sample (the file's
    # growth after the warm-up, over all its samples: an upper bound) times
    # its samples a second (over its samples' span).
    s1="$(stat -c %s "$work/perf.data")"
    read -r samples per_s < <(perf script -F time -i "$work/perf.data" 2>/dev/null |
        awk 'NR == 1 { t0 = $1 + 0 } { n++; last = $1 + 0 } END { printf "%d %.2f\n", n, (last > t0 ? n / (last - t0) : 0) }')
    rm -f "$work/perf.data"
    awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v n="$samples" -v ps="$per_s" \
        -v rss="$rss" -v cfg="$name" -v r="$r" \
        'BEGIN { t = t1 - t0; printf "%s %s %.4f %.0f %s - %.1f\n", cfg, r, (c1 - c0) / t * 100,
                 (n ? (s1 - s0) / n * ps : 0), ps, rss }' >>"$work/cpu"
}

cpu_config() {
    case "$1" in
    profd-*) cpu_profd "${1#profd-}" "$2" ;;
    perf-fp-*) cpu_perf -g "${1#perf-fp-}" "$2" ;;
    perf-dwarf-*) cpu_perf "--call-graph dwarf" "${1#perf-dwarf-}" "$2" ;;
    esac
}

# Median of column $2 (3 cpu %, 4 bytes/s, 5 samples/s, 6 lost, 7 rss) of configuration $1.
cmed() { awk -v c="$1" -v k="$2" '$1 == c && $k != "-" { print $k }' "$work/cpu" | median; }
cspread() { awk -v c="$1" -v k="$2" '$1 == c && $k != "-" { print $k }' "$work/cpu" | minmax; }

phase_cpu() {
    local configs=() r i c f n cpu
    for f in "${freqs[@]}"; do configs+=("profd-$f" "perf-fp-$f" "perf-dwarf-$f"); done
    n=${#configs[@]}
    start_load
    : >"$work/cpu"
    for ((r = 0; r < rounds; r++)); do
        for ((i = 0; i < n; i++)); do
            c="${configs[$(((i + r * 2) % n))]}"
            say "round $((r + 1))/$rounds: $c (load $(loadavg))"
            cpu_config "$c" "$((r + 1))"
        done
    done
    echo
    echo "== cpu: the profiler's own CPU on the load, ${cpu_s} s after a warm-up, $rounds rounds interleaved, medians"
    printf '%-16s %10s %17s %12s %10s %9s %8s\n' config "cpu %core" "(min..max)" "written B/s" "MiB/hour" samples/s "RSS MiB"
    for f in "${freqs[@]}"; do
        for c in "profd-$f" "perf-fp-$f" "perf-dwarf-$f"; do
            printf '%-16s %10.4f %17s %12.0f %10.1f %9.0f %8.1f\n' "$c" "$(cmed "$c" 3)" "$(cspread "$c" 3)" \
                "$(cmed "$c" 4)" "$(awk -v b="$(cmed "$c" 4)" 'BEGIN { print b * 3600 / 1048576 }')" \
                "$(cmed "$c" 5)" "$(cmed "$c" 7)"
        done
        echo "ratio profd / perf -g at $f Hz (CPU):                   $(awk -v a="$(cmed "profd-$f" 3)" -v b="$(cmed "perf-fp-$f" 3)" 'BEGIN { printf "%.2f", a / b }')"
        echo "ratio profd / perf --call-graph dwarf at $f Hz (CPU):   $(awk -v a="$(cmed "profd-$f" 3)" -v b="$(cmed "perf-dwarf-$f" 3)" 'BEGIN { printf "%.2f", a / b }')"
        echo "ratio profd / perf --call-graph dwarf at $f Hz (bytes): $(awk -v a="$(cmed "profd-$f" 4)" -v b="$(cmed "perf-dwarf-$f" 4)" 'BEGIN { printf "%.4f", a / b }')"
    done
    cpu="$(cmed "profd-${freqs[0]}" 3)"
    echo "profd at ${freqs[0]} Hz: $cpu % of one core (goal ≤ 1 %: $(awk -v c="$cpu" 'BEGIN { print (c <= 1 ? "met" : "NOT met") }'))"
    echo "(cpu %core: the profiler process's CPU time over the measurement; written B/s: profd's window"
    echo " files that ended in it, per second of window, or perf.data's growth over it; samples/s: all"
    echo " the samples the profiler received, every process's, from the windows' attributed + discarded or"
    echo " perf script; perf record copies the rings to its file and unwinds nothing, profd unwinds every"
    echo " stack copy, names the frames and encodes and writes each window)"
    echo "lost samples, profd (median per measurement): 19 Hz $(cmed "profd-${freqs[0]}" 6), ${freqs[1]} Hz $(cmed "profd-${freqs[1]}" 6)"
    echo "load average: $(loadavg)"
}

# -------------------------------------------------------------------- disk

# disk_run FREQ: profd at FREQ, 10 s windows, for $disk_windows whole
# windows; the facts of those windows (the first, partial, one left out).
disk_run() {
    local f="$1" t0 t1 files=()
    start_profd "disk-$f" "$f" 10
    # Whole windows: from the first boundary after start to the last.
    t0="$(awk -v n="$(now)" 'BEGIN { printf "%d", (int(n / 10) + 1) * 10 }')"
    t1=$((t0 + disk_windows * 10))
    sleep_until "$((t1 + 2))"
    stop_profd
    mapfile -t files < <(windows_between "$state" "$((t0 + 1))" "$((t1 + 2))")
    window_facts "${files[@]}" | sed "s/^/$f /" >>"$work/disk"
}

phase_disk() {
    local f
    start_load
    : >"$work/disk"
    for f in "${freqs[@]}"; do
        say "disk: $disk_windows windows at $f Hz (load $(loadavg))"
        disk_run "$f"
    done
    echo
    echo "== disk: window files at 10 s windows on the load, $disk_windows whole windows at each frequency"
    printf '%-6s %8s %12s %19s %12s %9s %10s %8s %10s\n' freq windows "bytes/window" "(min..max)" "MiB/host-hour" services processes stacks samples
    for f in "${freqs[@]}"; do
        awk -v f="$f" '$1 == f { print $3 }' "$work/disk" | median >"$work/disk.med"
        awk -v f="$f" -v med="$(cat "$work/disk.med")" -v range="$(awk -v f="$f" '$1 == f { print $3 }' "$work/disk" | minmax)" '
            $1 == f { n++; b += $3; s += $6; p += $7; k += $9; a += $10 + $11 }
            END { if (n) printf "%-6s %8d %12.0f %19s %12.2f %9.0f %10.0f %8.0f %10.0f\n", f " Hz", n, med, range,
                      b / n * 360 / 1048576, s / n, p / n, k / n, a / n }' "$work/disk"
    done
    echo "(bytes/window: median size of a window file in <state>/windows, gzip'd protobuf; MiB/host-hour:"
    echo " the mean × 360 windows an hour; services, processes, stacks (unique, per thread) and samples"
    echo " (attributed + discarded): means per window)"
    echo "load average: $(loadavg)"
}

# ----------------------------------------------------------------- latency

phase_latency() {
    local i e t f end_ns mtime done_t polls
    start_load
    start_profd latency 19 10
    : >"$work/latency"
    # The first window (partial) is left to go by.
    e="$(awk -v n="$(now)" 'BEGIN { printf "%d", (int(n / 10) + 2) * 10 }')"
    for ((i = 0; i < latency_windows; i++, e += 10)); do
        sleep_until "$(awk -v e="$e" 'BEGIN { printf "%.3f", e - 0.05 }')"
        polls=0
        while :; do
            polls=$((polls + 1))
            # An empty range answers too, with "samples: 0 attributed": only
            # windows with samples are kept.
            if "$profctl" query --from "$e" --to "$e" --top 1 2>/dev/null >"$work/poll" &&
                grep -q '^samples: [1-9]' "$work/poll"; then
                done_t="$(now)"
                break
            fi
            awk -v e="$e" -v n="$(now)" 'BEGIN { exit !(n > e + 30) }' &&
                die "the window ending at $e was not queryable 30 s later: $("$profctl" query --from "$e" --to "$e" --top 1 2>&1 | head -n 3)"
            sleep 0.01
        done
        f="$(windows_between "$state" "$e" "$((e + 5))" | head -n 1)"
        [ -n "$f" ] || die "no window file ends just after $e in $state/windows"
        end_ns="$(basename "$f" | cut -d- -f2)"
        mtime="$(stat -c %.9Y "$f")"
        awk -v e="$e" -v x="$end_ns" -v m="$mtime" -v d="$done_t" -v p="$polls" \
            'BEGIN { printf "%d %.1f %.1f %.1f %d\n", e, (x / 1e9 - e) * 1e3, (m - e) * 1e3, (d - e) * 1e3, p }' |
            tee -a "$work/latency" | awk '{ printf "continuous: window ending at %s: cut +%s ms, written +%s ms, queryable +%s ms\n", $1, $2, $3, $4 }' >&2
    done
    stop_profd
    echo
    echo "== latency: nominal end of a window → profctl query --from END --to END answers with it ($latency_windows windows, 19 Hz, 10 s)"
    printf '%-12s %10s %10s\n' "" "median ms" "max ms"
    for k in 2:cut 3:written 4:queryable; do
        printf '%-12s %10.1f %10.1f\n' "${k#*:}" "$(awk -v k="${k%%:*}" '{ print $k }' "$work/latency" | median)" \
            "$(awk -v k="${k%%:*}" '{ print $k }' "$work/latency" | sort -g | tail -n 1)"
    done
    echo "(cut: the window's end_unix_ns, when the profiler flushed the rings and closed it; written: its"
    echo " file's mtime; queryable: when a profctl query over the window first returned it, polled every"
    echo " 10 ms from 50 ms before the end, each poll a whole profctl run)"
    echo "load average: $(loadavg)"
}

# ------------------------------------------------------------------ memory

phase_memory() {
    local warm_s rss_s total_s start el next rss hwm anon file last_f t0 t1 files=() max_hwm pids=() p
    stop_load
    # Two windows, and a minute more than the symbolizer keeps files it
    # no longer uses: at the start every program on the host is named.
    warm_s=$((2 * rss_window > 180 ? 2 * rss_window : 180))
    rss_s="$(awk -v m="$rss_minutes" 'BEGIN { printf "%d", m * 60 }')"
    total_s=$((warm_s + rss_s))
    echo
    echo "== memory: $rss_procs live processes (idlers) + 2 many_stacks of $rss_paths paths, profd at $rss_freq Hz, ${rss_window} s windows; ${warm_s} s of warm-up then ${rss_s} s measured"
    "$work/idlers" "$rss_procs" "$((total_s + 120))" &
    pids+=("$!")
    for _ in 1 2; do
        "$work/many_stacks" "$((total_s + 120))" "$rss_paths" &
        pids+=("$!")
    done
    sleep 2
    start_profd memory "$rss_freq" "$rss_window"
    echo 5 >"/proc/$profd_pid/clear_refs"
    printf '%8s %8s %8s %8s %8s  %s\n' elapsed VmRSS VmHWM RssAnon RssFile load
    start="$(now)"
    t0="$(awk -v s="$start" -v w="$warm_s" 'BEGIN { printf "%.3f", s + w }')"
    : >"$work/rss"
    while :; do
        el="$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%d", b - a }')"
        if [ "$el" -ge "$warm_s" ] && [ ! -s "$work/rss" ]; then
            # The peak from here on: the warm-up's (every process named for
            # the first time) is not the steady state's.
            echo "-- measured from here (VmHWM reset)"
            echo 5 >"/proc/$profd_pid/clear_refs"
        fi
        # Only /proc is read meanwhile: the windows are read back (by
        # python) once the minutes are over, as profd would name a python
        # of ours like any other process, and hold its libraries' symbols.
        read -r rss hwm anon file < <(proc_mem "$profd_pid")
        printf '%7ss %7sM %7sM %7sM %7sM  %s\n' "$el" "$rss" "$hwm" "$anon" "$file" "$(loadavg)"
        [ "$el" -ge "$warm_s" ] && echo "$el $rss $hwm" >>"$work/rss"
        [ "$el" -ge "$total_s" ] && break
        next=$(((el / rss_every + 1) * rss_every))
        if [ "$el" -lt "$warm_s" ] && [ "$next" -gt "$warm_s" ]; then next="$warm_s"; fi
        if [ "$next" -gt "$total_s" ]; then next="$total_s"; fi
        sleep_until "$(awk -v a="$start" -v n="$next" 'BEGIN { printf "%.3f", a + n }')"
    done
    t1="$(now)"
    read -r _ max_hwm _ < <(proc_mem "$profd_pid")
    mapfile -t files < <(windows_between "$state" "$t0" "$t1")
    window_facts "${files[@]}" >"$work/rss-windows"
    # A cross-check through the daemon, after the memory readings: the last
    # whole window's stacks as profctl query names them, per process.
    local last_end folded
    last_end="$(tail -n 1 "$work/rss-windows" | awk '{ printf "%d", $4 / 1e9 }')"
    folded="$("$profctl" query --from "$last_end" --to "$last_end" --by process --format folded 2>"$work/query.err" | wc -l || true)"
    read -r rss hwm _ < <(proc_mem "$profd_pid")
    stop_profd
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    echo "windows in the measured minutes: $(wc -l <"$work/rss-windows"); per window:"
    awk '{ print $8 }' "$work/rss-windows" >"$work/k"
    awk '{ print $6 }' "$work/rss-windows" >"$work/p"
    awk '{ print $2 }' "$work/rss-windows" >"$work/b"
    echo "  unique stacks  median $(median <"$work/k"), range $(minmax <"$work/k")"
    echo "  processes      median $(median <"$work/p"), range $(minmax <"$work/p")"
    echo "  file bytes     median $(median <"$work/b"), range $(minmax <"$work/b")"
    echo "  lost samples   $(awk '{ l += $11 } END { print l + 0 }' "$work/rss-windows") in all; throttled $(awk '{ t += $12 } END { print t + 0 }' "$work/rss-windows")"
    echo "last window through profctl query --by process --format folded: $folded named stacks$( [ -s "$work/query.err" ] && echo " ($(head -n 1 "$work/query.err"))")"
    echo "after that query: VmRSS ${rss}M, VmHWM ${hwm}M"
    # Flat: the least-squares slope of VmRSS over the measured minutes, as
    # MiB over the whole of them, within 5 % of the mean.
    awk -v hwm="$max_hwm" -v min_stacks="$(sort -g "$work/k" | head -n 1)" -v min_procs="$(sort -g "$work/p" | head -n 1)" \
        -v want_procs="$rss_procs" '
        NR == 1 { first = $2; lo = $2; hi = $2; t0 = $1 }
        { n++; x = $1 - t0; sx += x; sy += $2; sxx += x * x; sxy += x * $2
          if ($2 < lo) lo = $2; if ($2 > hi) hi = $2; last = $2; span = x }
        END { slope = (n > 1 && span > 0) ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0
              mean = sy / n; drift = slope * span
              flat = (drift < 0 ? -drift : drift) <= 0.05 * mean
              shown = min_stacks >= 100000 && min_procs >= want_procs
              printf "VmHWM %.1f MiB over the measured minutes (≤ 128: %s); VmRSS %.1f → %.1f MiB, range %.1f..%.1f, trend %+.2f MiB over the measured %.0f s (flat, within 5 %% of the mean: %s)\n",
                     hwm, (hwm <= 128 ? "yes" : "no"), first, last, lo, hi, drift, span, (flat ? "yes" : "no")
              printf "fewest unique stacks in a window: %d, fewest processes: %d (goal ≤ 128 MiB, flat, with ≥ 100000 stacks and %d processes: %s)\n",
                     min_stacks, min_procs, want_procs,
                     (!shown ? "not shown: fewer stacks or processes than that" : (hwm <= 128 && flat) ? "met" : "NOT met") }' "$work/rss"
    echo "perf_event_max_sample_rate now: $(cat /proc/sys/kernel/perf_event_max_sample_rate) (at start $max_rate)"
    echo "load average: $(loadavg)"
}

if wants cpu; then phase_cpu; fi
if wants disk; then phase_disk; fi
if wants latency; then phase_latency; fi
stop_load
if wants memory; then phase_memory; fi
