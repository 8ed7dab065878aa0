#!/usr/bin/env bash
# One `riptide serve` against a 3-node replicated partition (three `riptide serve --node-id`
# processes on loopback), the same stock sysbench commands against each: durable commits on
# both, TABLES x TABLE_SIZE rows, the tests at each thread count, modes alternating (the order
# rotates every repetition), REPS repetitions, medians.
#
#   scripts/cluster-compare.sh OUTDIR
#
# Every run prints one RESULT line (tps, qps, latencies, ignored errors, and the CPU seconds of
# all the server processes of the mode together). OUTDIR gets the raw logs, results.txt and
# summary.md (replicated / single per test and thread count).
#
# Needs: sysbench, mysql (scripts/setup.sh), a release riptide binary (RIPTIDE, default
# target/release/riptide). Builds nothing.
# Environment: MODES REPS TESTS THREADS TIME TABLES TABLE_SIZE PORT RAFT_PORT ELECTION_MS
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/serve.sh
OUT=${1:?usage: scripts/cluster-compare.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
MODES=${MODES:-"single replicated"}
REPS=${REPS:-3}
TESTS=${TESTS:-"oltp_write_only oltp_point_select oltp_read_write"}
THREADS=${THREADS:-"1 16 64"}
TIME=${TIME:-10}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-20000}
PORT=${PORT:-3330}
RAFT_PORT=${RAFT_PORT:-4330}
ELECTION_MS=${ELECTION_MS:-1000}
RIPTIDE=${RIPTIDE:-target/release/riptide}
BASE=${BASE:-/tmp/cluster-compare}
RESULTS="$OUT/results.txt"
: > "$RESULTS"
CLK_TCK=$(getconf CLK_TCK)
PIDS=()

log() { echo "[$(date '+%F %T')] $*"; }

cpu_ticks() { # the CPU ticks of every server process of the mode
    local sum=0 p
    for p in "${PIDS[@]}"; do sum=$(( sum + $(awk '{print $14 + $15}' "/proc/$p/stat") )); done
    echo "$sum"
}

stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
trap stop_all EXIT

# leader_port PORTS...: the first port whose node leads (a gated statement reaches the table
# check, error 1146, instead of the follower's 1290).
leader_port() {
    local p out
    for p in "$@"; do
        out=$(mysql -h 127.0.0.1 -P "$p" -u root --connect-timeout=2 -e 'DELETE FROM sbtest.no_such_table WHERE 1 = 0' 2>&1 || true)
        if [[ "$out" == *1146* ]]; then echo "$p"; return 0; fi
    done
    return 1
}

start_mode() { # mode -> sets SB_PORT
    local mode=$1 dir="$BASE/$mode"
    rm -rf "$dir"
    mkdir -p "$dir"
    if [ "$mode" = single ]; then
        start_riptide_serve "$dir/n1" "$PORT" --sync 1
        PIDS=("$SERVE_PID")
        SB_PORT=$PORT
        return
    fi
    head -c 32 /dev/urandom | base64 > "$dir/secret"
    local members="1=127.0.0.1:$RAFT_PORT,2=127.0.0.1:$((RAFT_PORT + 1)),3=127.0.0.1:$((RAFT_PORT + 2))"
    local i ports=()
    for i in 1 2 3; do
        start_riptide_serve "$dir/n$i" "$((PORT + i))" --sync 1 --node-id "$i" \
            --raft-listen "127.0.0.1:$((RAFT_PORT + i - 1))" --cluster-secret-file "$dir/secret" \
            --bootstrap "$members" --election-timeout-ms "$ELECTION_MS"
        PIDS+=("$SERVE_PID")
        ports+=("$((PORT + i))")
    done
    for _ in $(seq 1 100); do
        if SB_PORT=$(leader_port "${ports[@]}") && \
            mysql -h 127.0.0.1 -P "$SB_PORT" -u root -e 'SHOW DATABASES' 2>/dev/null | grep -q sbtest; then
            return
        fi
        sleep 0.2
    done
    echo "no leader with database sbtest" >&2
    return 1
}

run_mode() { # mode rep
    local mode=$1 rep=$2 sb
    start_mode "$mode"
    mapfile -t sb < <(sysbench_riptide_flags "$SB_PORT")
    log "$mode rep $rep: prepare $TABLES x $TABLE_SIZE on port $SB_PORT"
    sysbench oltp_read_write "${sb[@]}" --threads="$TABLES" prepare > "$BASE/$mode/prepare.out" 2>&1
    for test in $TESTS; do
        for thr in $THREADS; do
            local out="$BASE/$mode/run_${test}_${thr}.out" c0 c1
            c0=$(cpu_ticks)
            sysbench "$test" "${sb[@]}" --threads="$thr" --time="$TIME" run > "$out" 2>&1 || true
            c1=$(cpu_ticks)
            cat "$out" >> "$OUT/raw-$mode-$rep.log"
            local tps qps avg p95 ign cpu
            tps=$(awk '/transactions:/ {gsub(/\(/,"",$3); print $3}' "$out")
            qps=$(awk '/queries:/ && !/performed/ {gsub(/\(/,"",$3); print $3}' "$out")
            avg=$(awk '/avg:/ {print $2}' "$out")
            p95=$(awk '/95th percentile:/ {print $3}' "$out")
            ign=$(awk '/ignored errors:/ {print $3}' "$out")
            cpu=$(awk -v a="$c0" -v b="$c1" -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", (b - a) / hz}')
            echo "RESULT mode=$mode test=$test threads=$thr tps=${tps:-NA} qps=${qps:-NA} avg_ms=${avg:-NA} p95_ms=${p95:-NA} ignored_errors=${ign:-NA} server_cpu_s=$cpu rep=$rep" | tee -a "$RESULTS"
        done
    done
    stop_all
}

read -r -a modes <<< "$MODES"
for rep in $(seq 1 "$REPS"); do
    n=${#modes[@]}
    for i in $(seq 0 $((n - 1))); do
        run_mode "${modes[$(( (i + rep - 1) % n ))]}" "$rep"
    done
done

# Medians of tps per (test, threads, mode), and replicated / single.
python3 - "$RESULTS" "$OUT/summary.md" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    if f["tps"] != "NA":
        rows.setdefault((f["test"], int(f["threads"]), f["mode"]), []).append((float(f["tps"]), float(f["server_cpu_s"])))
out = ["| test | threads | single tps | replicated tps | replicated / single | server CPU s single / replicated |", "|---|---|---|---|---|---|"]
for (test, thr) in sorted({(t, h) for (t, h, _) in rows}):
    s = rows.get((test, thr, "single"), [])
    r = rows.get((test, thr, "replicated"), [])
    med = lambda v, i: statistics.median(x[i] for x in v) if v else float("nan")
    ratio = med(r, 0) / med(s, 0) if s and r and med(s, 0) > 0 else float("nan")
    out.append(f"| {test} | {thr} | {med(s,0):.0f} ({len(s)}) | {med(r,0):.0f} ({len(r)}) | {ratio:.2f} | {med(s,1):.1f} / {med(r,1):.1f} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
