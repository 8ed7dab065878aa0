#!/usr/bin/env bash
# Where a 3-node replicated partition spends its CPU under sysbench: three `riptide serve
# --node-id` replicas on loopback (durable commits), TEST at THREADS threads for 10 s against
# the leader, each server's CPU seconds over the run, and (PERF=1, the default) a perf profile
# of the leader and of one follower.
#
#   scripts/cluster-profile.sh OUTDIR
#
# OUTDIR gets sb.txt (sysbench's report), cpu.txt (CPU ticks and context switches per server
# process over the run, leader first, then the entries the leader proposed since it started
# and the write sets in them) and leader.data / follower.data (perf). Read them with
# `perf report -i OUTDIR/leader.data --no-children --sort symbol`.
# Needs: sysbench, mysql, perf (PERF=1), a release riptide binary (RIPTIDE, default
# target/release/riptide). Builds nothing.
# Environment: TEST THREADS TABLES TABLE_SIZE PORT RAFT_PORT METRICS_PORT PERF EXTRA (more serve
# flags).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/serve.sh
OUT=${1:?usage: scripts/cluster-profile.sh OUTDIR}
RIPTIDE=${RIPTIDE:-target/release/riptide}
TEST=${TEST:-oltp_write_only}
THREADS=${THREADS:-16}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-20000}
PORT=${PORT:-3340}
RAFT_PORT=${RAFT_PORT:-4340}
METRICS_PORT=${METRICS_PORT:-9340}
PERF=${PERF:-1}
EXTRA=${EXTRA:-}
BASE=$(mktemp -d /tmp/cluster-profile.XXXXXX)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
head -c 32 /dev/urandom | base64 > "$BASE/secret"
members="1=127.0.0.1:$RAFT_PORT,2=127.0.0.1:$((RAFT_PORT + 1)),3=127.0.0.1:$((RAFT_PORT + 2))"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$BASE"
}
trap cleanup EXIT
for i in 1 2 3; do
    # shellcheck disable=SC2086 # EXTRA holds several flags
    start_riptide_serve "$BASE/n$i" $((PORT + i)) --sync 1 --node-id "$i" \
        --raft-listen "127.0.0.1:$((RAFT_PORT + i - 1))" --cluster-secret-file "$BASE/secret" \
        --bootstrap "$members" --election-timeout-ms 1000 --metrics-listen "127.0.0.1:$((METRICS_PORT + i))" $EXTRA
    PIDS+=("$SERVE_PID")
done
LEADER=0
for _ in $(seq 1 100); do
    for i in 1 2 3; do
        out=$(mysql -h 127.0.0.1 -P $((PORT + i)) -u root -e 'DELETE FROM sbtest.no_such_table WHERE 1 = 0' 2>&1 || true)
        if [[ "$out" == *1146* ]]; then LEADER=$i; fi
    done
    [ "$LEADER" != 0 ] && break
    sleep 0.2
done
[ "$LEADER" != 0 ] || { echo "no leader" >&2; exit 1; }
mapfile -t SB < <(sysbench_riptide_flags $((PORT + LEADER)))
sysbench oltp_read_write "${SB[@]}" --threads="$TABLES" prepare > /dev/null
LPID=${PIDS[$((LEADER - 1))]}
FPID=${PIDS[$((LEADER % 3))]}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Context switches of all the process's threads (voluntary and not).
switches() { { cat /proc/"$1"/task/*/status 2> /dev/null || true; } | awk '/ctxt_switches/ {n += $2} END {print n}'; }
declare -A T0 S0
for p in "${PIDS[@]}"; do T0[$p]=$(ticks "$p"); S0[$p]=$(switches "$p"); done
sysbench "$TEST" "${SB[@]}" --threads="$THREADS" --time=10 --report-interval=0 run > "$OUT/sb.txt" &
SBP=$!
PERF_PIDS=()
if [ "$PERF" = 1 ]; then
    sleep 1
    perf record -F 999 -g -p "$LPID" -o "$OUT/leader.data" -- sleep 6 2> /dev/null &
    PERF_PIDS+=($!)
    perf record -F 999 -g -p "$FPID" -o "$OUT/follower.data" -- sleep 6 2> /dev/null &
    PERF_PIDS+=($!)
fi
wait "$SBP"
{
    echo "role pid cpu_ticks context_switches"
    echo "leader $LPID $(( $(ticks "$LPID") - ${T0[$LPID]} )) $(( $(switches "$LPID") - ${S0[$LPID]} ))"
    for p in "${PIDS[@]}"; do
        [ "$p" = "$LPID" ] || echo "follower $p $(( $(ticks "$p") - ${T0[$p]} )) $(( $(switches "$p") - ${S0[$p]} ))"
    done
} > "$OUT/cpu.txt"
for p in "${PERF_PIDS[@]}"; do wait "$p" || true; done
grep -E "transactions:" "$OUT/sb.txt"
# The leader's group commit over the run: entries proposed and the write sets in them.
curl -s "http://127.0.0.1:$((METRICS_PORT + LEADER))/metrics" | grep '^riptide_raft_proposed_total' >> "$OUT/cpu.txt" || true
cat "$OUT/cpu.txt"
