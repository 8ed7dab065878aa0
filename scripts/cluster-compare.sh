#!/usr/bin/env bash
# One `riptide serve` against a 3-node replicated partition (three `riptide serve --node-id`
# processes on loopback) and against a 3-node cluster of 3 partitions (MODES=partitioned: each
# partition a group of three `riptide serve --node-id`, nine processes in all, node q+1 forming
# partition q's group so that the three leaders start on three nodes, and one `riptide router`
# per node; sysbench spreads its connections over the three routers), the same stock sysbench
# commands against each: durable commits, TABLES x TABLE_SIZE rows, the tests at each thread
# count, modes alternating (the order rotates every repetition), REPS repetitions, medians.
#
# Through the routers, sysbench's tables are loaded by scripts/lib/router_load.py (sysbench's
# own prepare sends multi-row INSERTs across partitions, which the router refuses). A test whose
# transactions span partitions (oltp_write_only, oltp_read_write) commits them by two-phase
# commit; oltp_read_write's range reads with ORDER BY, DISTINCT or SUM fan out and are combined
# by the router only in the text protocol, so run it with SB_EXTRA=--db-ps-mode=disable (a test
# that fails says tps=NA in its RESULT line).
#
#   scripts/cluster-compare.sh OUTDIR
#
# Every run prints one RESULT line (tps, qps, latencies, ignored errors, and the CPU seconds of
# all the server processes of the mode together). OUTDIR gets the raw logs, results.txt and
# summary.md (each mode's median tps, and each mode / single, per test and thread count).
#
# Needs: sysbench, mysql (scripts/setup.sh), a release riptide binary (RIPTIDE, default
# target/release/riptide). Builds nothing.
# Environment: MODES REPS TESTS THREADS TIME TABLES TABLE_SIZE PORT RAFT_PORT ELECTION_MS
#   SB_EXTRA (more sysbench flags for every run, every mode)
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
    if [ "$mode" = partitioned ]; then
        start_partitioned "$dir"
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

# start_partitioned DIR: 3 partitions x 3 nodes and a router per node; sets SB_PORT to the
# routers' ports (comma-separated, as sysbench takes them).
start_partitioned() {
    local dir=$1 q j id port raft members leader replicas=() routers=()
    head -c 32 /dev/urandom | base64 > "$dir/secret"
    for q in 0 1 2; do
        members=""
        for j in 1 2 3; do
            id=$(( (j - 1 - q + 3) % 3 + 1 ))
            members+="${members:+,}$id=127.0.0.1:$((RAFT_PORT + 10 + q * 3 + j))"
        done
        local ports=() addrs=()
        for j in 1 2 3; do
            id=$(( (j - 1 - q + 3) % 3 + 1 ))
            port=$((PORT + 10 + q * 3 + j))
            raft=$((RAFT_PORT + 10 + q * 3 + j))
            start_riptide_serve "$dir/p$q/n$j" "$port" --sync 1 --node-id "$id" \
                --raft-listen "127.0.0.1:$raft" --cluster-secret-file "$dir/secret" \
                --bootstrap "$members" --election-timeout-ms "$ELECTION_MS"
            PIDS+=("$SERVE_PID")
            ports+=("$port")
            addrs+=("127.0.0.1:$port")
        done
        replicas+=("$(IFS=,; echo "${addrs[*]}")")
        local ok=""
        for _ in $(seq 1 100); do
            if leader=$(leader_port "${ports[@]}") && \
                mysql -h 127.0.0.1 -P "$leader" -u root -e 'SHOW DATABASES' 2>/dev/null | grep -q sbtest; then
                ok=1
                log "partition $q: leader on port $leader"
                break
            fi
            sleep 0.2
        done
        [ -n "$ok" ] || { echo "partition $q: no leader with database sbtest" >&2; return 1; }
    done
    local args=()
    for q in 0 1 2; do args+=(--partition "${replicas[$q]}"); done
    for j in 1 2 3; do
        "$RIPTIDE" router --listen "127.0.0.1:$((PORT + j))" "${args[@]}" \
            > "$dir/router$j.out" 2> "$dir/router$j.err" &
        PIDS+=("$!")
        routers+=("$((PORT + j))")
        for _ in $(seq 1 100); do
            grep -q 'listening on' "$dir/router$j.out" 2>/dev/null && break
            sleep 0.1
        done
    done
    SB_PORT=$(IFS=,; echo "${routers[*]}")
}

run_mode() { # mode rep
    local mode=$1 rep=$2 sb
    start_mode "$mode"
    mapfile -t sb < <(sysbench_riptide_flags "$SB_PORT")
    log "$mode rep $rep: prepare $TABLES x $TABLE_SIZE on port $SB_PORT"
    if [ "$mode" = partitioned ]; then
        python3 scripts/lib/router_load.py 127.0.0.1 "${SB_PORT%%,*}" "$TABLES" "$TABLE_SIZE" 3 \
            > "$BASE/$mode/prepare.out" 2>&1
    else
        sysbench oltp_read_write "${sb[@]}" --threads="$TABLES" prepare > "$BASE/$mode/prepare.out" 2>&1
    fi
    for test in $TESTS; do
        for thr in $THREADS; do
            local out="$BASE/$mode/run_${test}_${thr}.out" c0 c1
            c0=$(cpu_ticks)
            # shellcheck disable=SC2086
            sysbench "$test" "${sb[@]}" ${SB_EXTRA:-} --threads="$thr" --time="$TIME" run > "$out" 2>&1 || true
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

# Medians of tps per (test, threads, mode), and each mode / single.
python3 - "$RESULTS" "$OUT/summary.md" <<'EOF'
import statistics, sys
rows, modes = {}, []
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    if f["mode"] not in modes:
        modes.append(f["mode"])
    rows.setdefault((f["test"], int(f["threads"]), f["mode"]), []).append(
        (float("nan") if f["tps"] == "NA" else float(f["tps"]), float(f["server_cpu_s"])))
modes.sort(key=lambda m: (m != "single", m))
others = [m for m in modes if m != "single"]
head = "| test | threads | " + " | ".join(f"{m} tps" for m in modes) + " | " + " | ".join(f"{m} / single" for m in others) + " | server CPU s (" + " / ".join(modes) + ") |"
out = [head, "|" + "---|" * (3 + len(modes) + len(others))]
def med(v, i):
    xs = [x[i] for x in v if x[i] == x[i]]
    return statistics.median(xs) if xs else float("nan")
for (test, thr) in sorted({(t, h) for (t, h, _) in rows}):
    cells = [f"{med(rows.get((test, thr, m), []), 0):.0f} ({sum(1 for x in rows.get((test, thr, m), []) if x[0] == x[0])})" for m in modes]
    s = med(rows.get((test, thr, "single"), []), 0)
    ratios = [f"{med(rows.get((test, thr, m), []), 0) / s:.2f}" if s == s and s > 0 else "nan" for m in others]
    cpu = " / ".join(f"{med(rows.get((test, thr, m), []), 1):.1f}" for m in modes)
    out.append(f"| {test} | {thr} | " + " | ".join(cells) + " | " + " | ".join(ratios) + f" | {cpu} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
