#!/usr/bin/env bash
# The fleet's load on ClickHouse, simulated: windows recorded by a real
# `profd --continuous` replayed as N hosts into two clickhouse-server
# shards (Debian's package, on loopback) under the Distributed tables of
# `profd schema clickhouse --cluster shards`.
#
#  record   profd --continuous at its default frequency (19 Hz) with
#           --record-window (10 s) windows for --record-seconds (80 s),
#           while xz compresses in a loop, fixed_work runs with and without
#           frame pointers and many_stacks walks 4096 call paths (plus
#           whatever else the machine runs); its <state>/windows/*.window.gz
#           are the recording.
#  simulate for each N of --hosts (10,10000): its first --real-hosts (100)
#           get the recorded windows in turn as the sink's rows (their own
#           host name, window ids, pids, tids and address layout), one a
#           window span, the hour ending at the last whole hour. The first
#           --per-window-seconds (20) go as the sink sends (one INSERT per
#           window and table), the rest in INSERTs of --batch-windows (200)
#           windows. Beyond them, the hosts are copies made in ClickHouse
#           (INSERT ... SELECT with new host names and window ids): the raw
#           stacks and windows up to --raw-hosts (1000), the materialized
#           views filling the rollups; then only stacks_hours and windows.
#           At each stage: the bytes of the active parts per table
#           (system.parts), and `profctl fleet` for one service over the
#           hour, timed --runs (20) times after one untimed run with
#           --explain (the tables it read), its folded profile compared
#           with `--table raw`'s up to --exact-hosts (100). The
#           output says which hosts were sent and which copied. Results in
#           docs/fleet.md ("Scale").
#
# Usage: benches/fleet.sh [--record-seconds S] [--record-window S] [--no-build]
#                         [--windows DIR] [fleet_sim options...]
#   --windows DIR   replay this recording (a state dir's windows/) instead
#                   of recording one
#   fleet_sim options: --hosts 10,10000 --real-hosts 100 --raw-hosts 1000
#                   --exact-hosts 100
#                   --minutes 60 --max-windows 36000
#                   --per-window-seconds 20 --batch-windows 200
#                   --inserters 4 --runs 20 --slow-query-seconds 15
#                   --service NAME
#                   (target/release/fleet_sim --help)
#
# ClickHouse's data stays under /tmp while it runs (about 5 GB at 1 000
# hosts) and is removed at the end.
#
# Needs root (perf for the recording), clickhouse-server (apt-get install
# clickhouse-server), gcc and xz. Not part of `cargo test` or CI.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=benches/lib.sh
. "$root/benches/lib.sh"
die() { echo "fleet: $*" >&2; exit 1; }

record_seconds=80
record_window=10
build=1
windows=''
sim_args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --record-seconds) record_seconds="$2"; shift 2 ;;
    --record-window) record_window="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --windows) windows="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) sim_args+=("$1"); shift ;;
    esac
done

[ "$(id -u)" = 0 ] || [ -n "$windows" ] || die "recording needs root (perf): run as root, or give --windows DIR"
command -v clickhouse-server >/dev/null || die "clickhouse-server is missing (apt-get install clickhouse-server)"

target="${CARGO_TARGET_DIR:-$root/target}"
if [ "$build" = 1 ]; then
    (cd "$root" && cargo build -q -p profd &&
        cargo build -q --release -p profctl -p profd-benches --bin profctl --bin fleet_sim) ||
        die "cargo build failed"
fi

work="$(mktemp -d /tmp/profd-fleet.XXXXXX)"
cleanup() {
    stop_jobs
    rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$windows" ]; then
    command -v "${CC:-gcc}" >/dev/null || die "${CC:-gcc} is missing (apt-get install gcc)"
    command -v xz >/dev/null || die "xz is missing (apt-get install xz-utils)"
    w="$root/benches/workloads"
    "${CC:-gcc}" -O2 -g -pthread -Wall -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
        -fno-optimize-sibling-calls -o "$work/fixed_work_fp" "$w/fixed_work.c" || die "building fixed_work failed"
    "${CC:-gcc}" -O2 -g -pthread -Wall -fomit-frame-pointer -o "$work/fixed_work_nofp" "$w/fixed_work.c" ||
        die "building fixed_work failed"
    "${CC:-gcc}" -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
        -fno-ipa-icf -Wall -DLEVELS=17 -o "$work/many_stacks" "$w/many_stacks.c" || die "building many_stacks failed"
    find /usr/bin -type f -size +100k 2>/dev/null | head -n 40 | xargs cat 2>/dev/null |
        head -c $((16 << 20)) >"$work/xz.in" || true
    (while :; do xz -T1 -6 -c "$work/xz.in" >/dev/null; done) &
    "$work/fixed_work_fp" -o /dev/null -t 86400 &
    "$work/fixed_work_nofp" -o /dev/null -t 86400 &
    "$work/many_stacks" 86400 4096 >/dev/null &
    "$target/debug/profd" --socket "$work/profd.sock" --state-dir "$work/state" \
        --continuous --continuous-window "$record_window" >"$work/profd.log" 2>&1 &
    profd_pid=$!
    echo "recording ${record_seconds} s of windows (profd --continuous, ${record_window} s windows)" >&2
    sleep "$record_seconds"
    kill -TERM "$profd_pid"
    wait "$profd_pid" || true
    stop_jobs
    windows="$work/state/windows"
    ls "$windows"/*.window.gz >/dev/null 2>&1 || die "profd wrote no windows: $(tail -n 5 "$work/profd.log")"
fi

echo "load average before the simulation: $(loadavg)" >&2
"$target/release/fleet_sim" --windows "$windows" --profctl "$target/release/profctl" "${sim_args[@]}"
echo "load average after: $(loadavg)" >&2
