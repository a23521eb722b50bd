#!/usr/bin/env bash
# What the always-on daemon (profd --continuous at its default settings)
# costs on a busy, realistic host, against the same host without it and
# with perf record -a at the same frequency. The host mix, all real
# programs, runs for the whole run (parts chosen with --mix):
#
#  cargo    a clean debug build of this workspace's profd-common and its
#           crate graph (offline, from the local registry, into a scratch
#           --target-dir, dependencies at opt-level 0), removed and built
#           again in a loop: short-lived rustc, build scripts and cc
#           mapping librustc_driver (~150 MB) and the linker
#  gcc      gcc -O2 -c of four C files of the repository, in a loop (gcc,
#           cc1, as: three processes a file)
#  python   a Python service (Debian's python3): 4 threads, each busy
#           20 ms then asleep 80 ms (benches/workloads/mix_service.py)
#  java     a JVM service (java 17): 4 threads, the same duty cycle, JIT
#           code (benches/workloads/MixService.java)
#  node     a node service: 25 ms of work every 100 ms
#           (benches/workloads/mix_service.js)
#  churn    a shell loop starting --churn-rate (50) processes a second:
#           true, sed, awk, grep, cut, sort, tr, date, basename, head, sleep
#  idle     --idle (300) sleeping processes
#
# Each part counts its progress (crates compiled, compiles, processes
# started, requests served). Phases, in this order:
#
#  bare        the mix alone, half before the others and half after them
#              (--bare-minutes in all): the baseline of the mix's progress
#  continuous  + profd --continuous (19 Hz, 10 s windows, a state dir) for
#              --minutes (default 20)
#  sessions    + 10 on-demand sessions on the mix's processes (profctl
#              attach, DWARF and frame pointers, one --children on the gcc
#              loop) for --sessions-minutes, into the same daemon (its
#              VmHWM reset at the phase's start), until the sessions end
#  perf        perf record -a -g -F 19, then perf record -a --call-graph
#              dwarf -F 19, --perf-minutes each
#
# Every second: the profiler's VmRSS, VmHWM, RssAnon, RssFile, RssShmem
# (/proc/PID/status), threads, open descriptors, CPU (utime + stime of
# /proc/PID/stat, which keeps the time of threads that ended, and the
# schedstat sum of lib.sh's proc_cpu), bytes and reads (/proc/PID/io), the
# host's new processes (/proc/stat) and load average, and the mix's
# counters: the raw series is kept in <work>/series.tsv (keep=1 or --keep).
# Every minute, the profiler's descriptors by file and mapped files by
# resident size (<work>/fds-*.txt, smaps-*.txt), and profd's memory line
# of `profctl info` (<work>/info-*.txt).
#
# Usage: benches/hostmix.sh [--quick] [--only PHASES] [--mix PARTS]
#                           [--minutes M] [--bare-minutes M]
#                           [--sessions-minutes M] [--perf-minutes M]
#                           [--warmup S] [--idle N] [--churn-rate N]
#                           [--heaptrack] [--profile-profd S] [--nice N]
#                           [--no-build] [--keep]
#   --quick               a smoke run of about 4 minutes (40 s phases)
#   --only PHASES         comma-separated: bare, continuous, sessions, perf
#                         (default all; sessions needs continuous)
#   --mix PARTS           comma-separated: cargo, gcc, python, java, node,
#                         churn, idle (default all)
#   --minutes M           the continuous phase (default 20)
#   --bare-minutes M      the baseline, both halves together (default 6)
#   --sessions-minutes M  the sessions' duration (default 10)
#   --perf-minutes M      each perf record phase (default 4)
#   --warmup S            seconds the mix runs before the first phase (60)
#   --idle N              sleeping processes (default 300)
#   --churn-rate N        processes the churn loop starts a second (50)
#   --heaptrack           run profd under heaptrack (Debian package
#                         heaptrack): its peak heap by call site at the end
#                         (the daemon is slower under it: figures perturbed)
#   --profile-profd S     S seconds into the continuous phase (from a third
#                         of it), perf record --call-graph dwarf -p profd
#                         and perf stat of its system calls and faults for S
#                         seconds, against the host's new processes
#   --nice N              run everything at this nice level
#   --no-build            use the release binaries already built
#   --keep                keep the work directory (series, logs, reports)
#
# HOSTMIX_PROFD_ARGS: more options for profd (e.g. --memory-limit 256M).
#
# Needs root, perf (linux-perf), gcc, cargo with this workspace's crates in
# its local registry, Debian's python3, java and javac 17, node. Builds the
# release binaries, starts its own profd on a private socket and state
# directory, and stops every process it started when it exits.
set -euo pipefail
export LC_ALL=C

root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/benches/lib.sh"
phases=bare,continuous,sessions,perf
parts=cargo,gcc,python,java,node,churn,idle
cont_min=20 bare_min=6 sess_min=10 perf_min=4 warmup=60 idle=300 churn_rate=50
heaptrack=0 profile_s=0 nice_level='' build=1 keep=0 quick=0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
die() { echo "hostmix: $*" >&2; exit 1; }
say() { echo "hostmix: $*" >&2; }

given=()
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --only) phases="${2:?--only needs phases}"; shift ;;
    --mix) parts="${2:?--mix needs parts}"; shift ;;
    --minutes) given+=("cont_min=${2:?}"); shift ;;
    --bare-minutes) given+=("bare_min=${2:?}"); shift ;;
    --sessions-minutes) given+=("sess_min=${2:?}"); shift ;;
    --perf-minutes) given+=("perf_min=${2:?}"); shift ;;
    --warmup) given+=("warmup=${2:?}"); shift ;;
    --idle) idle="${2:?}"; shift ;;
    --churn-rate) churn_rate="${2:?}"; shift ;;
    --heaptrack) heaptrack=1 ;;
    --profile-profd) profile_s="${2:?}"; shift ;;
    --nice) nice_level="${2:?}"; shift ;;
    --no-build) build=0 ;;
    --keep) keep=1 ;;
    -h | --help) usage ;;
    *) echo "hostmix: unknown option '$1'" >&2; usage ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then cont_min=0.67 bare_min=0.67 sess_min=0.67 perf_min=0.34 warmup=15; fi
for g in "${given[@]}"; do printf -v "${g%%=*}" '%s' "${g#*=}"; done
for v in cont_min bare_min sess_min perf_min; do
    [[ "${!v}" =~ ^[0-9]*\.?[0-9]+$ ]] || die "minutes must be a number, not '${!v}'"
done
for v in warmup idle churn_rate profile_s; do
    [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
[ "$churn_rate" -ge 5 ] || die "--churn-rate must be at least 5"
[[ "$phases" =~ ^(bare|continuous|sessions|perf)(,(bare|continuous|sessions|perf))*$ ]] ||
    die "--only takes bare, continuous, sessions, perf (comma-separated), not '$phases'"
[[ "$parts" =~ ^(cargo|gcc|python|java|node|churn|idle)(,(cargo|gcc|python|java|node|churn|idle))*$ ]] ||
    die "--mix takes cargo, gcc, python, java, node, churn, idle (comma-separated), not '$parts'"
wants() { [[ ",$phases," == *",$1,"* ]]; }
mixes() { [[ ",$parts," == *",$1,"* ]]; }
if wants sessions && ! wants continuous; then die "--only sessions needs continuous too (the sessions join its daemon)"; fi
secs() { awk -v m="$1" 'BEGIN { printf "%d", m * 60 + 0.5 }'; }
cont_s=$(secs "$cont_min") bare_s=$(secs "$bare_min") sess_s=$(secs "$sess_min") perf_s=$(secs "$perf_min")

# ------------------------------------------------------------------ checks

[ "$(id -u)" = 0 ] || die "run as root: profd --continuous and perf -a sample the whole host"
need_perf
py=/usr/bin/python3
for c in "${CC:-gcc}" cargo java javac node "$py" setsid; do
    command -v "$c" >/dev/null || die "$c is missing (gcc, cargo, openjdk-17-jdk-headless, nodejs, python3, util-linux)"
done
[ "$heaptrack" = 0 ] || command -v heaptrack >/dev/null || die "heaptrack is missing (apt-get install heaptrack)"
max_rate="$(cat /proc/sys/kernel/perf_event_max_sample_rate)"
tck="$(getconf CLK_TCK)"

bin="${CARGO_TARGET_DIR:-$root/target}/release"
if [ "$build" = 1 ]; then
    say "building release binaries"
    (cd "$root" && cargo build --release -q -p profd -p profctl) || die "the release build failed"
fi
profd="$bin/profd" profctl="$bin/profctl"
for b in "$profd" "$profctl"; do [ -x "$b" ] || die "$b is missing (run without --no-build)"; done

use_nice "$nice_level"
start_work hostmix
[ "$keep" = 0 ] || keep=1
before_cleanup() {
    stop_all
    if [ "$(cat /proc/sys/kernel/perf_event_max_sample_rate)" != "$max_rate" ]; then
        say "the kernel lowered perf_event_max_sample_rate during the run; set back to $max_rate"
        echo "$max_rate" >/proc/sys/kernel/perf_event_max_sample_rate || true
    fi
}
trap 'stop_all; cleanup_work' EXIT
prog="$work/progress"
mkdir -p "$prog"
# What the report needs (benches/hostmix-report.sh WORK reads it again).
printf 'churn_rate=%s\nprofile_s=%s\nheaptrack=%s\ntck=%s\n' "$churn_rate" "$profile_s" "$heaptrack" "$tck" >"$work/settings"

# ----------------------------------------------------------------- the mix

declare -A part_pid=()
idle_pids=()
# Each part runs in a session of its own (setsid: its pid is its process
# group's), so that it stops with every process it started.
start_part() {
    local name="$1"
    shift
    setsid "$@" </dev/null >"$work/$name.log" 2>&1 &
    part_pid[$name]=$!
}
stop_group() { kill -TERM -- "-$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
export work prog root churn_rate py
export CC="${CC:-gcc}"

cargo_loop() {
    set +e +o pipefail
    local fails=0 t="$work/cargo-target" l st
    while :; do
        rm -rf "$t"
        cargo build --offline --locked -p profd-common --manifest-path "$root/Cargo.toml" --target-dir "$t" \
            --config 'profile.dev.package."*".opt-level=0' 2>&1 | while IFS= read -r l; do
            case "$l" in *Compiling*) printf x >>"$prog/cargo" ;; esac
            printf '%s\n' "$l"
        done >"$work/cargo-build.log"
        st=${PIPESTATUS[0]}
        if [ "$st" = 0 ]; then
            printf x >>"$prog/cargo-builds"
            fails=0
        else
            fails=$((fails + 1))
            [ "$fails" -lt 2 ] || { echo "cargo build failed twice: $(tail -n 5 "$work/cargo-build.log")" >"$prog/failed-cargo"; return 1; }
        fi
    done
}
gcc_loop() {
    set +e
    local s
    while :; do
        for s in benches/workloads/fixed_work.c benches/workloads/many_stacks.c tests/workloads/offcpu.c \
            tests/workloads/privdrop.c; do
            "$CC" -O2 -c "$root/$s" -o "$work/gcc.o" || { echo "$CC -O2 -c $s failed" >"$prog/failed-gcc"; return 1; }
            printf x >>"$prog/gcc"
        done
    done
}
churn_loop() {
    set +e
    local per=10 period next now d i=0 k s
    per=$(((churn_rate + 4) / 5)) period=$((1000000 * per / churn_rate)) next=${EPOCHREALTIME/./}
    while :; do
        for ((k = 0; k < per - 1; k++, i++)); do
            case $((i % 10)) in
            0) /bin/true ;;
            1) sed 's/a/b/' <<<abc ;;
            2) awk '{ s += $1 } END { print s }' <<<"1 2 3" ;;
            3) grep -c b <<<abc ;;
            4) cut -c1-2 <<<abc ;;
            5) sort <<<$'b\na' ;;
            6) tr a-z A-Z <<<abc ;;
            7) date +%s ;;
            8) basename /usr/bin/env ;;
            9) head -c 8 /etc/hostname ;;
            esac >/dev/null
        done
        next=$((next + period)) now=${EPOCHREALTIME/./}
        [ $((now - next)) -lt 1000000 ] || next=$now # over a second behind: no burst
        d=$((next > now ? next - now : 0))
        printf -v s '%d.%06d' $((d / 1000000)) $((d % 1000000))
        sleep "$s"
        printf x >>"$prog/churn"
    done
}
export -f cargo_loop gcc_loop churn_loop

start_mix() {
    local i
    if mixes java; then
        javac -d "$work/java" "$root/benches/workloads/MixService.java" || die "javac failed"
    fi
    mixes cargo && start_part cargo bash -c cargo_loop
    mixes gcc && start_part gcc bash -c gcc_loop
    mixes churn && start_part churn bash -c churn_loop
    mixes python && start_part python "$py" "$root/benches/workloads/mix_service.py" "$prog/python" 4 20 80
    mixes java && start_part java java -Xmx256m -cp "$work/java" MixService "$prog/java" 4 20 80
    mixes node && start_part node node "$root/benches/workloads/mix_service.js" "$prog/node" 25 100
    if mixes idle; then
        for ((i = 0; i < idle; i++)); do
            sleep 1000000 &
            idle_pids+=("$!")
        done
    fi
    return 0
}
stop_mix() {
    local n p
    for n in "${!part_pid[@]}"; do stop_group "${part_pid[$n]}"; done
    part_pid=()
    for p in "${idle_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${idle_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    idle_pids=()
}
check_mix() {
    local n f
    for f in "$prog"/failed-*; do [ -e "$f" ] && die "$(cat "$f")"; done
    for n in "${!part_pid[@]}"; do
        kill -0 "${part_pid[$n]}" 2>/dev/null || die "the $n part of the mix stopped: $(tail -n 5 "$work/$n.log")"
    done
}
counters=(cargo cargo-builds gcc churn python java node)
# The mix's counters now, in $cnt (tab-separated): bytes of the append-only
# ones, numbers of the others.
read_counters() {
    local c v files=() out=() sizes=()
    for c in "${counters[@]}"; do
        case "$c" in python | java | node) ;; *) [ -e "$prog/$c" ] || : >"$prog/$c"; files+=("$prog/$c") ;; esac
    done
    mapfile -t sizes < <(stat -c %s "${files[@]}")
    for c in "${counters[@]}"; do
        case "$c" in
        python | java | node) v=0; [ -s "$prog/$c" ] && read -r v <"$prog/$c" ;;
        *) v="${sizes[0]}" sizes=("${sizes[@]:1}") ;;
        esac
        out+=("${v:-0}")
    done
    local IFS=$'\t'
    cnt="${out[*]}"
}

# ---------------------------------------------------------------- profilers

profd_pid='' ht_pid='' perf_pid='' sess_pids=()
start_profd() {
    export PROFD_SOCKET="$work/profd.sock"
    local args=(--socket "$PROFD_SOCKET" --state-dir "$work/state" --continuous)
    # Extra profd options (HOSTMIX_PROFD_ARGS), e.g. a --memory-limit to compare.
    local extra
    read -r -a extra <<<"${HOSTMIX_PROFD_ARGS:-}"
    args+=("${extra[@]}")
    case " ${extra[*]} " in *" --log-level "*) ;; *) args+=(--log-level warn) ;; esac
    if [ "$heaptrack" = 1 ]; then
        heaptrack -o "$work/heaptrack.profd" "$profd" "${args[@]}" >"$work/heaptrack.log" 2>"$work/profd.log" &
        ht_pid=$!
        for _ in $(seq 100); do
            profd_pid="$(pgrep -P "$ht_pid" -x profd || true)"
            [ -z "$profd_pid" ] || break
            sleep 0.1
        done
    else
        "$profd" "${args[@]}" 2>"$work/profd.log" &
        profd_pid=$!
    fi
    [ -n "$profd_pid" ] || die "profd did not start: $(cat "$work/profd.log" "$work/heaptrack.log" 2>/dev/null)"
    # Under heaptrack the daemon takes far longer to start.
    for _ in $(seq $((heaptrack ? 3000 : 300))); do
        "$profctl" info >/dev/null 2>&1 && break
        kill -0 "$profd_pid" 2>/dev/null || die "profd exited at start: $(cat "$work/profd.log")"
        sleep 0.1
    done
    "$profctl" info 2>/dev/null | grep -qi 'continuous.*on' || die "profd does not say continuous profiling is on"
}
stop_profd() {
    [ -n "$profd_pid" ] || return 0
    kill -TERM "$profd_pid" 2>/dev/null || true
    wait "$profd_pid" 2>/dev/null || true
    while kill -0 "$profd_pid" 2>/dev/null; do sleep 0.2; done
    if [ -n "$ht_pid" ]; then wait "$ht_pid" 2>/dev/null || true; fi
    profd_pid='' ht_pid=''
}
stop_all() {
    local p
    for p in "${sess_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sess_pids=()
    [ -z "$perf_pid" ] || { kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true; perf_pid=''; }
    stop_profd
    stop_mix
}

# ----------------------------------------------------------------- sampling

# One line a second to $work/series.tsv:
#   phase t load1 rss hwm anon file shmem threads fds cpu_ticks_s cpu_sched_s
#   rchar syscr procs COUNTERS... (memory in KiB, '-' without a profiler)
# The host's processes started since boot, in $procs.
procs_now() { local k v; while read -r k v _; do [ "$k" = processes ] && { procs=$v; return; }; done </proc/stat; }
sample() {
    local phase="$1" t="$2" pid="$3" k v l1 st rss=- hwm=- anon=- file=- shmem=- thr=- fds=- ticks=- sched=- rchar=- syscr=-
    read -r l1 _ </proc/loadavg
    procs_now
    read_counters
    if [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; then
        rss=0 hwm=0 anon=0 file=0 shmem=0 thr=0
        while read -r k v _; do
            case "$k" in VmRSS:) rss=$v ;; VmHWM:) hwm=$v ;; RssAnon:) anon=$v ;; RssFile:) file=$v ;;
            RssShmem:) shmem=$v ;; Threads:) thr=$v ;; esac
        done <"/proc/$pid/status"
        local fd=("/proc/$pid/fd/"*)
        fds=${#fd[@]}
        read -r -a st <"/proc/$pid/stat"
        ticks=$((st[13] + st[14]))
        sched="$(proc_cpu "$pid")"
        while read -r k v; do
            case "$k" in rchar:) rchar=$v ;; syscr:) syscr=$v ;; esac
        done <"/proc/$pid/io"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$phase" "$t" "$l1" "$rss" "$hwm" "$anon" \
        "$file" "$shmem" "$thr" "$fds" "$ticks" "$sched" "$rchar" "$syscr" "$procs" "$cnt" \
        >>"$work/series.tsv"
}
# A profiler's descriptors by file and its mapped files by resident KiB.
snapshot() {
    local pid="$1" tag="$2"
    [ -d "/proc/$pid" ] || return 0
    ls -l "/proc/$pid/fd" 2>/dev/null | sed -n 's/.* -> //p' | sort | uniq -c |
        sort -rn >"$work/fds-$tag.txt" || true
    awk '/^[0-9a-f]+-[0-9a-f]+ / { name = (NF >= 6 ? $6 : "[anon]"); size = 0 }
         /^Size:/ { sizes[name] += $2 } /^Rss:/ { rss[name] += $2 }
         END { for (n in rss) printf "%d %d %s\n", rss[n], sizes[n], n }' "/proc/$pid/smaps" 2>/dev/null |
        sort -rn >"$work/smaps-$tag.txt" || true
    # profd's own account: its memory level, sheds and caches.
    [ "$pid" = "${profd_pid:-}" ] && "$profctl" info 2>/dev/null | grep -E '^ *memory:' >"$work/info-$tag.txt" || true
}
# run_phase NAME SECONDS PID [HOOK]: sample every second for SECONDS (with
# HOOK ELAPSED called each second; a hook returning 1 ends the phase early,
# 2 extends it), a snapshot every minute and at the end.
run_phase() {
    local name="$1" s="$2" pid="$3" hook="${4:-}" t0 el=0 next h
    say "phase $name: ${s} s (load $(loadavg))"
    t0=${EPOCHREALTIME/./}
    echo "$name $(now)" >>"$work/phases"
    while :; do
        sample "$name" "$el" "$pid"
        [ -z "$pid" ] || [ $((el % 60)) -ne 0 ] || snapshot "$pid" "$name-$el"
        h=0
        [ -z "$hook" ] || "$hook" "$el" || h=$?
        [ "$h" = 1 ] && break
        [ "$el" -ge "$s" ] && [ "$h" != 2 ] && break
        check_mix
        el=$((el + 1))
        next=$((t0 + el * 1000000 - ${EPOCHREALTIME/./}))
        [ "$next" -le 0 ] || sleep "$(printf '%d.%06d' $((next / 1000000)) $((next % 1000000)))"
    done
    [ -z "$pid" ] || snapshot "$pid" "$name-end"
}

# ---------------------------------------------------------------- phases

echo "== hostmix: profd --continuous on a busy, realistic host"
echo "date:     $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine:  $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "kernel:   $(uname -r); perf $(perf version | awk '{ print $3 }'); perf_event_max_sample_rate $max_rate"
echo "profd:    $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' + local changes')$([ "$heaptrack" = 1 ] && echo ', under heaptrack')"
echo "mix:      $parts (idle $idle, churn $churn_rate/s); nice $(nice); load average at start $(loadavg)"

start_mix
say "mix started; warming up for $warmup s (load $(loadavg))"
el=0
while [ "$el" -lt "$warmup" ]; do sleep 5; el=$((el + 5)); check_mix; done
: >"$work/series.tsv"

# The first half of the baseline.
if wants bare; then run_phase bare $((bare_s / 2)) ''; fi

profile_hook() {
    local at=$((cont_s / 3 > 60 ? cont_s / 3 : 60))
    [ "$profile_s" -gt 0 ] && [ "$1" = "$at" ] || return 0
    say "profiling profd for $profile_s s (load $(loadavg))"
    procs_now
    echo "$procs $(awk '/^rchar/ { print $2 }' "/proc/$profd_pid/io") $(loadavg)" >"$work/profile-start"
    perf record -q -F 499 --call-graph dwarf,16384 -p "$profd_pid" -o "$work/profd-perf.data" -- sleep "$profile_s" \
        >"$work/profd-perf.log" 2>&1 &
    perf stat -x, -e page-faults,major-faults,syscalls:sys_enter_openat,syscalls:sys_enter_read,syscalls:sys_enter_pread64,syscalls:sys_enter_mmap,syscalls:sys_enter_munmap,syscalls:sys_enter_close,syscalls:sys_enter_statx,syscalls:sys_enter_newfstatat,syscalls:sys_enter_readlinkat,syscalls:sys_enter_getdents64 \
        -p "$profd_pid" -o "$work/profd-stat.csv" -- sleep "$profile_s" &
    ( sleep "$profile_s"; procs_now; echo "$procs $(awk '/^rchar/ { print $2 }' "/proc/$profd_pid/io") $(loadavg)" >"$work/profile-end" ) &
}
if wants continuous; then
    start_profd
    run_phase continuous "$cont_s" "$profd_pid" profile_hook
fi

sessions_hook() {
    local p alive=0
    [ "$1" -ge "$sess_s" ] || return 0
    for p in "${sess_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] && [ "$1" -lt $((sess_s + 180)) ] && return 2
    return 1
}
if wants sessions; then
    echo 5 >"/proc/$profd_pid/clear_refs"
    # name pid unwind [--children]
    targets=()
    mixes python && targets+=("python-dwarf ${part_pid[python]} dwarf" "python-fp ${part_pid[python]} fp")
    mixes java && targets+=("java-dwarf ${part_pid[java]} dwarf" "java-fp ${part_pid[java]} fp")
    mixes node && targets+=("node-dwarf ${part_pid[node]} dwarf" "node-fp ${part_pid[node]} fp")
    mixes gcc && targets+=("gcc-children ${part_pid[gcc]} dwarf --children")
    mixes churn && targets+=("churn-dwarf ${part_pid[churn]} dwarf")
    mixes cargo && targets+=("cargo-fp ${part_pid[cargo]} fp")
    mixes idle && targets+=("idle-fp ${idle_pids[0]} fp")
    for t in "${targets[@]}"; do
        read -r n p u c <<<"$t"
        # shellcheck disable=SC2086
        "$profctl" attach "$p" --unwind "$u" $c --duration "$sess_s" --format json >"$work/session-$n.json" \
            2>"$work/session-$n.err" &
        sess_pids+=("$!")
    done
    run_phase sessions "$sess_s" "$profd_pid" sessions_hook
    i=0
    for t in "${targets[@]}"; do
        read -r n _ <<<"$t"
        status=0
        wait "${sess_pids[$i]}" || status=$?
        echo "$n $status $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=d.get("totals",d); print(t.get("attributed", t.get("samples","?")))' "$work/session-$n.json" 2>/dev/null || echo '?')" >>"$work/sessions"
        i=$((i + 1))
    done
    sess_pids=()
fi
if [ -n "$profd_pid" ]; then
    for f in "$work/state/windows"/*.window.gz; do [ -e "$f" ] && echo "$f"; done 2>/dev/null | wc -l >"$work/windows-count"
    stop_profd
fi

perf_phase() {
    local name="$1" mode="$2" status=0
    perf record -q -a $mode -F 19 -B -o "$work/$name.data" >"$work/$name.log" 2>&1 &
    perf_pid=$!
    run_phase "$name" "$perf_s" "$perf_pid"
    kill -INT "$perf_pid"
    wait "$perf_pid" || status=$?
    perf_pid=''
    [ "$status" = 0 ] || [ "$status" = 130 ] || die "perf record $mode failed ($status): $(cat "$work/$name.log")"
    stat -c %s "$work/$name.data" >"$work/$name.bytes"
    rm -f "$work/$name.data"
}
if wants perf; then
    perf_phase perf-fp -g
    perf_phase perf-dwarf "--call-graph dwarf"
fi
if wants bare; then run_phase bare2 $((bare_s - bare_s / 2)) ''; fi
stop_mix
rm -rf "$work/cargo-target" "$work/gcc.o"

. "$root/benches/hostmix-report.sh"
