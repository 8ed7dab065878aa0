#!/usr/bin/env bash
# riptide serve against MariaDB InnoDB and MyRocks with the same stock sysbench commands:
# durable commits on all three, TABLES x TABLE_SIZE rows, the sysbench matrix at each thread
# count, engines alternating (the order rotates every repetition), REPS repetitions, medians.
#
#   scripts/sql-compare.sh OUTDIR
#
# MariaDB runs through ../shared/anchors/sysbench_mariadb.sh (its own mariadbd per engine,
# fresh datadir, innodb_flush_log_at_trx_commit=1 / rocksdb_flush_log_at_trx_commit=1);
# Riptide runs the same steps here (fresh data dir, prepare, settle, warm-up, the tests with
# oltp_insert last) against `riptide serve --sync 1`. Every run prints one RESULT line in the
# anchor's format; Riptide's also carry the server's CPU seconds (user+system) and CPU
# microseconds per query. OUTDIR gets the raw logs, results.txt and summary.md.
#
# Needs: sysbench, mariadb-server and mariadb-plugin-rocksdb (Debian), a release riptide
# binary (RIPTIDE, default target/release/riptide). Builds nothing.
# Environment: ENGINES REPS TESTS THREADS TIME TABLES TABLE_SIZE SETTLE WARMUP PORT RIPTIDE_PORT
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/serve.sh
OUT=${1:?usage: scripts/sql-compare.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ENGINES=${ENGINES:-"riptide innodb rocksdb"}
REPS=${REPS:-3}
TESTS=${TESTS:-"oltp_point_select oltp_update_index oltp_update_non_index oltp_read_write oltp_insert"}
THREADS=${THREADS:-"1 8 64"}
TIME=${TIME:-10}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-100000}
SETTLE=${SETTLE:-5}
WARMUP=${WARMUP:-5}
PORT=${PORT:-3310}
RIPTIDE_PORT=${RIPTIDE_PORT:-3320}
RIPTIDE=${RIPTIDE:-target/release/riptide}
ANCHOR=${ANCHOR:-../shared/anchors/sysbench_mariadb.sh}
BASE=${BASE:-/tmp/sql-compare}
RESULTS="$OUT/results.txt"
: > "$RESULTS"
CLK_TCK=$(getconf CLK_TCK)

log() { echo "[$(date '+%F %T')] $*"; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run_riptide() { # rep
    local rep=$1 dir="$BASE/riptide" pid
    rm -rf "$dir"
    start_riptide_serve "$dir" "$RIPTIDE_PORT" --sync 1
    pid=$SERVE_PID
    local sb
    mapfile -t sb < <(sysbench_riptide_flags "$RIPTIDE_PORT")
    log "riptide rep $rep: prepare $TABLES x $TABLE_SIZE"
    local t0; t0=$(date +%s)
    sysbench oltp_read_write "${sb[@]}" --threads="$TABLES" prepare > "$dir/prepare.out" 2>&1
    log "riptide prepare took $(( $(date +%s) - t0 )) s"
    sleep "$SETTLE"
    if [ "$WARMUP" -gt 0 ]; then
        sysbench oltp_read_only "${sb[@]}" --threads=8 --time="$WARMUP" run > /dev/null 2>&1 || true
    fi
    local order=()
    for t in $TESTS; do [ "$t" = oltp_insert ] || order+=("$t"); done
    [[ " $TESTS " == *" oltp_insert "* ]] && order+=(oltp_insert)
    for test in "${order[@]}"; do
        for thr in $THREADS; do
            local out="$dir/run_${test}_${thr}.out" c0 c1
            c0=$(cpu_ticks "$pid")
            sysbench "$test" "${sb[@]}" --threads="$thr" --time="$TIME" --report-interval=10 run > "$out" 2>&1 || true
            c1=$(cpu_ticks "$pid")
            cat "$out" >> "$OUT/raw-riptide-$rep.log"
            local tps qps avg p95 ign cpu per
            tps=$(awk '/transactions:/ {gsub(/\(/,"",$3); print $3}' "$out")
            qps=$(awk '/queries:/ && !/performed/ {gsub(/\(/,"",$3); print $3}' "$out")
            avg=$(awk '/avg:/ {print $2}' "$out")
            p95=$(awk '/95th percentile:/ {print $3}' "$out")
            ign=$(awk '/ignored errors:/ {print $3}' "$out")
            cpu=$(awk -v a="$c0" -v b="$c1" -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", (b - a) / hz}')
            per=$(awk -v c="$cpu" -v q="${qps:-0}" -v t="$TIME" 'BEGIN {if (q > 0) printf "%.1f", c * 1e6 / (q * t); else print "NA"}')
            echo "RESULT engine=riptide test=$test threads=$thr rand=special tps=${tps:-NA} qps=${qps:-NA} avg_ms=${avg:-NA} p95_ms=${p95:-NA} ignored_errors=${ign:-NA} server_cpu_s=$cpu cpu_us_per_query=$per rep=$rep" | tee -a "$RESULTS"
        done
    done
    kill -TERM "$pid"
    wait "$pid" || true
    rm -rf "$dir"
}

run_mariadb() { # engine rep
    local engine=$1 rep=$2
    log "$engine rep $rep (through $ANCHOR)"
    ENGINES=$engine TESTS="$TESTS" THREADS="$THREADS" TIME="$TIME" TABLES="$TABLES" TABLE_SIZE="$TABLE_SIZE" \
        SETTLE="$SETTLE" WARMUP="$WARMUP" PORT="$PORT" SKEW_TEST=none BASE="$BASE/mariadb" \
        RAW_LOG="$OUT/raw-$engine-$rep.log" bash "$ANCHOR" > /dev/null 2>&1 || log "$engine anchor exited with $?"
    grep '^RESULT' "$OUT/raw-$engine-$rep.log" | sort -u | sed "s/\$/ rep=$rep/" | tee -a "$RESULTS"
}

read -r -a engines <<< "$ENGINES"
n=${#engines[@]}
for rep in $(seq 1 "$REPS"); do
    for i in $(seq 0 $((n - 1))); do
        e=${engines[$(( (i + rep - 1) % n ))]}
        if [ "$e" = riptide ]; then run_riptide "$rep"; else run_mariadb "$e" "$rep"; fi
    done
done

python3 - "$RESULTS" "$OUT/summary.md" "$TABLES" "$TABLE_SIZE" "$TIME" "$REPS" <<'EOF'
import re, statistics, sys
from collections import defaultdict
res, out, tables, size, time_s, reps = sys.argv[1:]
runs = defaultdict(list)
cpu = defaultdict(list)
for line in open(res):
    kv = dict(re.findall(r'(\w+)=(\S+)', line))
    if kv.get('rand') != 'special' or kv.get('tps', 'NA') == 'NA':
        continue
    key = (kv['test'], int(kv['threads']))
    runs[(kv['engine'], key)].append(float(kv['tps']))
    if 'cpu_us_per_query' in kv and kv['cpu_us_per_query'] != 'NA':
        cpu[key].append(float(kv['cpu_us_per_query']))
keys = sorted({k for (_, k) in runs})
med = lambda v: statistics.median(v) if v else None
fmt = lambda v: f"{v:,.0f}" if v is not None else "—"
with open(out, 'w') as f:
    f.write(f"# sysbench: riptide serve vs MariaDB InnoDB and MyRocks\n\n")
    f.write(f"{tables} tables x {size} rows, {time_s} s per run, durable commits on all three, "
            f"engines alternating, medians of {reps} (transactions/s).\n\n")
    f.write("| test | threads | Riptide | InnoDB | MyRocks | Riptide / best | server CPU µs/query |\n|---|---:|---:|---:|---:|---:|---:|\n")
    for k in keys:
        r, i, m = (med(runs.get((e, k), [])) for e in ('riptide', 'innodb', 'rocksdb'))
        best = max([x for x in (i, m) if x is not None], default=None)
        ratio = f"{r / best:.2f}x" if r is not None and best else "—"
        c = med(cpu.get(k, []))
        f.write(f"| {k[0]} | {k[1]} | {fmt(r)} | {fmt(i)} | {fmt(m)} | {ratio} | {c if c is not None else '—'} |\n")
print(open(out).read())
EOF
