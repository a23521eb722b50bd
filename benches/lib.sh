# Helpers shared by the benchmark scripts (sourced, not run).

now() { date +%s.%N; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# CPU time of a whole process in seconds: the scheduler's nanosecond counts
# of its threads (/proc/PID/task/*/schedstat), exact where utime + stime
# count whole clock ticks (perf record's own CPU in a run is under one). A
# thread that ends between two readings takes its time since the first with
# it (profd's threads live as long as the daemon, but for tokio's blocking
# pool, which mostly waits).
proc_cpu() {
    { cat "/proc/$1"/task/*/schedstat 2>/dev/null || true; } | awk '{ ns += $1 } END { printf "%.6f", ns / 1e9 }'
}

# Stop the calling script's jobs that still run, with their children (the
# shells' loops' commands, the targets profctl run started), and wait.
stop_jobs() {
    local pid kids k
    for pid in $(jobs -p); do
        kids="$(pgrep -P "$pid" || true)"
        kill -TERM "$pid" 2>/dev/null || true
        for k in $kids; do kill -TERM "$k" 2>/dev/null || true; done
    done
    wait 2>/dev/null || true
}

# perf must be there and run (Debian's linux-perf).
need_perf() {
    command -v perf >/dev/null ||
        die "perf is missing: install the Debian package linux-perf (apt-get install linux-perf)"
    perf version >/dev/null 2>&1 ||
        die "perf does not run: $(perf version 2>&1 | head -n 1); install linux-perf (apt-get install linux-perf)"
}

# From here on every process started inherits nice level $1 (none when
# empty). With autogroups (kernel.sched_autogroup_enabled), nice only ranks
# the processes of one session against each other and sessions share the
# CPUs by their autogroup's nice: that is set too, and give_back_nice
# restores it.
autogroup_nice=''
use_nice() {
    [ -n "$1" ] || return 0
    renice -n "$1" -p $$ >/dev/null || die "cannot set nice level $1"
    if [ -w "/proc/$$/autogroup" ]; then
        autogroup_nice="$(awk '{ print $3 }' "/proc/$$/autogroup")"
        echo "$1" >"/proc/$$/autogroup" || die "cannot set the autogroup's nice level to $1"
    fi
}
give_back_nice() {
    if [ -n "$autogroup_nice" ]; then echo "$autogroup_nice" >"/proc/$$/autogroup" || true; fi
}

# A work directory for the run, in $work ($1 names it), and what happens on
# exit: the jobs still running are stopped (with their children: the
# targets profctl run started), before_cleanup runs if the script defines
# one, the nice level is given back, then the directory goes (kept with
# keep=1).
start_work() {
    work="$(mktemp -d "/tmp/$1.XXXXXX")"
    trap cleanup_work EXIT
    trap 'exit 130' INT TERM
}
cleanup_work() {
    trap - EXIT INT TERM
    stop_jobs
    if declare -F before_cleanup >/dev/null; then before_cleanup; fi
    give_back_nice
    if [ "${keep:-0}" = 1 ]; then say "work directory kept: $work"; else rm -rf "$work"; fi
}

# Start "$profd" with its socket in $work (PROFD_SOCKET, exported for
# profctl) and nothing kept on disk; $profd_pid is its pid. Dies when it
# does not answer within 10 s.
start_profd() {
    export PROFD_SOCKET="$work/profd.sock"
    "$profd" --socket "$PROFD_SOCKET" --no-persist --log-level warn 2>"$work/profd.log" &
    profd_pid=$!
    for _ in $(seq 100); do
        "$profctl" info >/dev/null 2>&1 && break
        kill -0 "$profd_pid" 2>/dev/null || die "profd exited at start: $(cat "$work/profd.log")"
        sleep 0.1
    done
    "$profctl" info >/dev/null 2>&1 || die "profd does not answer on $PROFD_SOCKET: $(cat "$work/profd.log")"
}
