#!/usr/bin/env bash
# The summary of benches/hostmix.sh (sourced by it once the run is over):
# per phase, the profiler's memory, descriptors and CPU, and the mix's
# progress against the baseline, from <work>/series.tsv; then what the
# profiler held (descriptors by file, mapped files), the sessions, and the
# heap and CPU profiles of profd when they were asked for.
#
# Usage (again, on a work directory kept with --keep):
#   benches/hostmix-report.sh WORK
if [ -z "${work:-}" ]; then
    set -eu
    work="${1:?usage: benches/hostmix-report.sh WORK (a directory benches/hostmix.sh --keep kept)}"
    [ -s "$work/series.tsv" ] && [ -s "$work/settings" ] || { echo "hostmix-report: $work holds no run" >&2; exit 1; }
    root="$(cd "$(dirname "$0")/.." && pwd)"
    . "$root/benches/lib.sh"
    . "$work/settings"
    py=/usr/bin/python3
fi
# A reading cut short by head is no failure.
set +o pipefail

# Columns of series.tsv.
C_PHASE=1 C_T=2 C_LOAD=3 C_RSS=4 C_HWM=5 C_ANON=6 C_FILE=7 C_SHMEM=8 C_THR=9 C_FDS=10 C_TICKS=11 C_SCHED=12
C_RCHAR=13 C_SYSCR=14 C_PROCS=15 C_CARGO=16 C_BUILDS=17 C_GCC=18 C_CHURN=19 C_PY=20 C_JAVA=21 C_NODE=22
churn_per=$(((churn_rate + 4) / 5))

# rows PHASE: that phase's rows (bare: both halves).
rows() {
    case "$1" in
    bare) awk -F'\t' '$1 == "bare" || $1 == "bare2"' "$work/series.tsv" ;;
    *) awk -F'\t' -v p="$1" '$1 == p' "$work/series.tsv" ;;
    esac
}
# col PHASE COLUMN [second]: the column's values (second: the phase's
# second half only, its steady state).
col() {
    rows "$1" | awk -F'\t' -v k="$2" -v h="${3:-}" '{ v[NR] = $k } END { for (i = (h ? int(NR / 2) + 1 : 1); i <= NR; i++) if (v[i] != "-") print v[i] }'
}
maxof() { sort -g | tail -n 1 | awk '{ print ($1 == "" ? "-" : $1) }'; }
mib() { awk '{ printf ($1 == "-" || $1 == "nan" ? "%s" : "%.1f"), ($1 == "-" || $1 == "nan" ? $1 : $1 / 1024) }'; }
# delta PHASE COLUMN: the column's growth over the phase and the seconds it
# took (bare: the sum of both halves).
delta() {
    rows "$1" | awk -F'\t' -v k="$2" '
        $1 != ph { if (ph != "") { d += last - first; s += lt - ft } ph = $1; first = $k; ft = $2 }
        { last = $k; lt = $2 }
        END { if (ph != "") { d += last - first; s += lt - ft }; printf "%s %s\n", d, s }'
}
rate() { delta "$1" "$2" | awk -v m="${3:-1}" '{ printf "%.4f", ($2 > 0 ? $1 / $2 * m : 0) }'; }
has() { [ -n "$(rows "$1" | head -n 1)" ]; }

all_phases=()
for p in bare continuous sessions perf-fp perf-dwarf; do has "$p" && all_phases+=("$p"); done

echo
echo "== the profiler: memory (MiB), descriptors, CPU; per phase"
printf '%-11s %5s %6s %8s %8s %7s %13s %13s %6s %9s %4s %8s %8s %9s %9s\n' phase secs load "RSS med" "RSS max" VmHWM \
    "Anon med/max" "File med/max" Shmem "fds m/max" thr "CPU %" "(sched)" "KiB read" "reads"
printf '%-11s %5s %6s %8s %8s %7s %13s %13s %6s %9s %4s %8s %8s %9s %9s\n' "" "" median "2nd half" "" "" "" "" max "" max \
    "of core" "" "/new proc" "/new proc"
for p in "${all_phases[@]}"; do
    read -r _ secs < <(delta "$p" $C_T)
    load="$(col "$p" $C_LOAD | median)"
    if [ "$p" = bare ]; then
        printf '%-11s %5.0f %6.2f   (no profiler)\n' "$p" "$secs" "$load"
        continue
    fi
    read -r dt _ < <(delta "$p" $C_TICKS)
    read -r ds _ < <(delta "$p" $C_SCHED)
    read -r dr _ < <(delta "$p" $C_RCHAR)
    read -r dc _ < <(delta "$p" $C_SYSCR)
    read -r dp _ < <(delta "$p" $C_PROCS)
    printf '%-11s %5.0f %6.2f %8s %8s %7s %6s/%-6s %6s/%-6s %6s %4s/%-4s %4s %8.2f %8.2f %9.1f %9.1f\n' "$p" "$secs" "$load" \
        "$(col "$p" $C_RSS second | median | mib)" "$(col "$p" $C_RSS | maxof | mib)" "$(col "$p" $C_HWM | maxof | mib)" \
        "$(col "$p" $C_ANON second | median | mib)" "$(col "$p" $C_ANON | maxof | mib)" \
        "$(col "$p" $C_FILE second | median | mib)" "$(col "$p" $C_FILE | maxof | mib)" "$(col "$p" $C_SHMEM | maxof | mib)" \
        "$(col "$p" $C_FDS second | median)" "$(col "$p" $C_FDS | maxof)" "$(col "$p" $C_THR | maxof)" \
        "$(awk -v d="$dt" -v s="$secs" -v t="$tck" 'BEGIN { print (s > 0 ? d / t / s * 100 : 0) }')" \
        "$(awk -v d="$ds" -v s="$secs" 'BEGIN { print (s > 0 ? d / s * 100 : 0) }')" \
        "$(awk -v d="$dr" -v n="$dp" 'BEGIN { print (n > 0 ? d / n / 1024 : 0) }')" \
        "$(awk -v d="$dc" -v n="$dp" 'BEGIN { print (n > 0 ? d / n : 0) }')"
done
echo "(RSS med: median VmRSS over the phase's second half; VmHWM: the peak since the profiler started,"
echo " for sessions since the phase started; Anon/File/Shmem: RssAnon, RssFile, RssShmem; CPU: utime +"
echo " stime over the phase, (sched) the schedstat sum of the threads alive at each reading; KiB read"
echo " and reads: /proc/PID/io rchar and syscr over the host's new processes; load: 1-minute load average)"

echo
echo "== the mix's progress a second (a minute for cargo and gcc), and against the baseline"
printf '%-11s %9s %11s %7s %9s %9s %9s %9s %9s %9s\n' phase "new proc" "cargo crt" builds "gcc" "churn" python java node "slowdown"
printf '%-11s %9s %11s %7s %9s %9s %9s %9s %9s %9s\n' "" "/s" "/min" "" "/min" "proc/s" "req/s" "req/s" "req/s" "mean %"
declare -A base=()
: >"$work/slowdown"
for p in "${all_phases[@]}"; do
    vals=() slow=()
    for k in $C_PROCS $C_CARGO $C_BUILDS $C_GCC $C_CHURN $C_PY $C_JAVA $C_NODE; do
        case $k in $C_CARGO | $C_GCC) m=60 ;; $C_CHURN) m=$churn_per ;; *) m=1 ;; esac
        r="$(rate "$p" $k $m)"
        [ $k = $C_BUILDS ] && r="$(delta "$p" $k | awk '{ print $1 }')"
        vals+=("$r")
        if [ "$p" = bare ]; then base[$k]="$r"; fi
        case $k in $C_CARGO | $C_GCC | $C_PY | $C_JAVA | $C_NODE)
            [ -n "${base[$k]:-}" ] && awk -v b="${base[$k]}" 'BEGIN { exit !(b > 0) }' && slow+=("$(awk -v r="$r" -v b="${base[$k]}" 'BEGIN { print r / b }')") ;;
        esac
    done
    mean="$(printf '%s\n' "${slow[@]:-}" | awk 'NF { s += log($1); n++ } END { if (n) printf "%.1f", (1 - exp(s / n)) * 100; else printf "-" }')"
    echo "$p $mean" >>"$work/slowdown"
    printf '%-11s %9.1f %11.1f %7s %9.1f %9.1f %9.2f %9.2f %9.2f %9s\n' "$p" "${vals[@]}" "$mean"
done
echo "(slowdown: how much less the mix did than in the baseline, the geometric mean over cargo, gcc,"
echo " python, java and node; churn is paced and slows only when it cannot keep its rate; builds: whole"
echo " cargo builds finished in the phase)"

cpu_of() {
    read -r d s < <(delta "$1" $C_TICKS)
    awk -v d="$d" -v s="$s" -v t="$tck" 'BEGIN { printf "%.3f", (s > 0 ? d / t / s * 100 : 0) }'
}
slow_of() { awk -v p="$1" '$1 == p { print $2 }' "$work/slowdown"; }
echo
if has continuous; then
    c="$(cpu_of continuous)" rss="$(col continuous $C_RSS second | median | mib)" hwm="$(col continuous $C_HWM | maxof | mib)"
    echo "goal, continuous alone: steady VmRSS $rss MiB (≤ 64: $(awk -v v="$rss" 'BEGIN { print (v <= 64 ? "met" : "NOT met") }')), VmHWM $hwm MiB (≤ 128: $(awk -v v="$hwm" 'BEGIN { print (v <= 128 ? "met" : "NOT met") }')), CPU $c % of a core (≤ 1: $(awk -v v="$c" 'BEGIN { print (v <= 1 ? "met" : "NOT met") }'))"
fi
if has sessions; then
    hwm="$(col sessions $C_HWM | maxof | mib)"
    echo "goal, with 10 sessions: VmHWM $hwm MiB (≤ 128: $(awk -v v="$hwm" 'BEGIN { print (v <= 128 ? "met" : "NOT met") }'))"
fi
for q in perf-fp perf-dwarf; do
    if has continuous && has "$q"; then
        echo "profd --continuous / $q at 19 Hz: CPU $(awk -v a="$(cpu_of continuous)" -v b="$(cpu_of "$q")" 'BEGIN { printf (b > 0 ? "%.1f" : "-"), (b > 0 ? a / b : 0) }') ×, VmHWM $(awk -v a="$(col continuous $C_HWM | maxof)" -v b="$(col "$q" $C_HWM | maxof)" 'BEGIN { printf "%.1f", a / b }') ×; the mix slowed $(slow_of continuous) % under profd, $(slow_of "$q") % under $q ($(awk '{ printf "%.1f MiB written", $1 / 1048576 }' "$work/$q.bytes"))"
    fi
done

# What the profiler held: at the reading with the most descriptors, those
# open more than once; at the one with the largest RSS, the mapped files.
for p in continuous sessions; do
    has "$p" || continue
    f="$(for x in "$work"/fds-"$p"-*.txt; do [ -e "$x" ] && echo "$(awk '{ n += $1 } END { print n + 0 }' "$x") $x"; done | sort -rn | head -n 1 | cut -d' ' -f2)"
    if [ -n "$f" ]; then
        echo
        echo "== $p: descriptors at the reading with the most ($(basename "$f" .txt)): $(awk '{ n += $1 } END { print n + 0 }' "$f") open, $(wc -l <"$f") files; held more than once:"
        awk '$1 > 1 && n++ < 12 { print "  " $0 }' "$f"
    fi
    s="$(for x in "$work"/smaps-"$p"-*.txt; do [ -e "$x" ] && echo "$(awk '{ n += $1 } END { print n + 0 }' "$x") $x"; done | sort -rn | head -n 1 | cut -d' ' -f2)"
    if [ -n "$s" ]; then
        echo "== $p: mappings at the reading with the largest RSS ($(basename "$s" .txt)), resident KiB, size KiB:"
        head -n 12 "$s" | sed 's/^/  /'
        echo "  perf rings (anon_inode:[perf_event]), the most at a reading: $(for x in "$work"/smaps-"$p"-*.txt; do awk '$3 ~ /perf_event/ { n += $2 } END { print n + 0 }' "$x"; done | sort -g | tail -n 1 | awk '{ printf "%.1f MiB", $1 / 1024 }') mapped (locked memory, not in VmRSS)"
    fi
done
if [ -s "$work/sessions" ]; then
    echo
    echo "== sessions (name, profctl's exit status, samples):"
    sed 's/^/  /' "$work/sessions"
fi
[ -s "$work/windows-count" ] && echo "continuous windows written: $(cat "$work/windows-count")"

if [ -s "$work/profile-end" ]; then
    read -r p0 r0 l0 _ <"$work/profile-start"
    read -r p1 r1 l1 _ <"$work/profile-end"
    n=$((p1 - p0))
    echo
    echo "== profd profiled for $profile_s s: $n new processes on the host (load $l0 → $l1), $(awk -v r=$((r1 - r0)) -v n=$n 'BEGIN { printf "%.0f KiB read", (n ? r / n / 1024 : 0) }') a new process"
    awk -F, -v n=$n 'NF > 3 && $1 ~ /^[0-9]/ { printf "  %-36s %10d  %8.2f a new process\n", $3, $1, (n ? $1 / n : 0) }' "$work/profd-stat.csv"
    if [ -s "$work/profd-perf.data" ]; then
        perf report -i "$work/profd-perf.data" --no-children --sort sym --stdio -g none --percent-limit 1 2>/dev/null |
            grep -v '^#' | grep -v '^$' >"$work/profd-perf-self.txt" || true
        perf report -i "$work/profd-perf.data" --children --sort sym --stdio -g none --percent-limit 4 2>/dev/null |
            grep -v '^#' | grep -v '^$' >"$work/profd-perf-children.txt" || true
        echo "  profd's CPU by function, self (perf report --no-children):"
        head -n 25 "$work/profd-perf-self.txt" | sed 's/^/    /'
        echo "  and with callees (--children, ≥ 4 %):"
        head -n 40 "$work/profd-perf-children.txt" | sed 's/^/    /'
    fi
fi
if [ "$heaptrack" = 1 ]; then
    ht="$(ls "$work"/heaptrack.profd.* 2>/dev/null | head -n 1)"
    if [ -n "$ht" ]; then
        heaptrack_print -f "$ht" -p 1 -a 0 -T 0 -l 0 -n 40 -s 8 >"$work/heaptrack.txt" 2>&1 || true
        heaptrack_print -f "$ht" -F "$work/heaptrack-peak.folded" --flamegraph-cost-type peak >/dev/null 2>&1 || true
        echo
        echo "== heaptrack: $(grep -E '^peak heap memory consumption|^peak RSS|^total memory leaked' "$work/heaptrack.txt" | tr '\n' ';')"
        echo "  the heap at its peak by component (the innermost of profd's own frames names it):"
        "$py" "$root/benches/heap_components.py" "$work/heaptrack-peak.folded" | sed 's/^/    /'
        echo "  (largest consumers with their stacks: $work/heaptrack.txt; heaptrack --analyze $ht)"
    fi
fi
echo
echo "load average at the end: $(loadavg)"
