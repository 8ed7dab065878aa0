#!/usr/bin/env bash
# Where `riptide serve` spends its CPU under sysbench: server CPU per query, and a perf profile
# of the server process split into kernel (network, scheduling, fsync), protocol, SQL (parse,
# bind, execute), engine, async runtime and libc (malloc, copies).
#
#   scripts/serve-profile.sh OUTDIR
#
# Needs perf (Debian linux-perf), sysbench, a release binary (RIPTIDE, default
# target/release/riptide). Environment: TESTS THREADS TIME TABLES TABLE_SIZE PORT SYNC.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/serve-profile.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TESTS=${TESTS:-"oltp_point_select oltp_update_index oltp_read_write oltp_insert"}
THREADS=${THREADS:-8}
TIME=${TIME:-8}
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-100000}
PORT=${PORT:-3321}
SYNC=${SYNC:-1}
RIPTIDE=${RIPTIDE:-target/release/riptide}
DIR=$(mktemp -d /tmp/serve-profile.XXXXXX)
trap 'kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; rm -rf "$DIR"' EXIT

"$RIPTIDE" serve --data-dir "$DIR/data" --listen "127.0.0.1:$PORT" --sync "$SYNC" --create-database sbtest \
    > "$DIR/serve.out" 2>&1 &
PID=$!
for _ in $(seq 1 100); do grep -q 'listening on' "$DIR/serve.out" && break; sleep 0.1; done
SB=(--db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$PORT" --mysql-user=root --mysql-password=
    --mysql-db=sbtest --tables="$TABLES" --table-size="$TABLE_SIZE")
sysbench oltp_read_write "${SB[@]}" --threads="$TABLES" prepare > /dev/null
CLK_TCK=$(getconf CLK_TCK)
{
    echo "# Where riptide serve's CPU goes ($THREADS sysbench threads, $TABLES x $TABLE_SIZE rows, sync=$SYNC)"
    echo
    echo "Share of the server's CPU samples (perf, self time), by where the code is."
    echo
    echo "| test | tps | server CPU µs/query | kernel | protocol | SQL | engine | runtime | libc | other |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} > "$OUT/profile.md"
for test in $TESTS; do
    c0=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    perf record -F 999 -g -p "$PID" -o "$OUT/perf.$test.data" -- sleep "$TIME" > /dev/null 2>&1 &
    PERF=$!
    sysbench "$test" "${SB[@]}" --threads="$THREADS" --time="$TIME" run > "$OUT/$test.out"
    wait "$PERF" || true
    c1=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    tps=$(awk '/transactions:/ {gsub(/\(/,"",$3); print $3}' "$OUT/$test.out")
    qps=$(awk '/queries:/ && !/performed/ {gsub(/\(/,"",$3); print $3}' "$OUT/$test.out")
    per=$(awk -v a="$c0" -v b="$c1" -v hz="$CLK_TCK" -v q="$qps" -v t="$TIME" 'BEGIN {printf "%.1f", (b - a) / hz * 1e6 / (q * t)}')
    perf report -i "$OUT/perf.$test.data" --no-children --sort sym --stdio 2>/dev/null \
        | awk -v test="$test" -v tps="$tps" -v per="$per" '
            /^ +[0-9.]+%/ {
                p = $1; sub(/%/, "", p); line = $0
                if (line ~ /\[k\]/) k += p
                else if (line ~ /riptide_server::protocol/) pr += p
                else if (line ~ /riptide_server::sql|sqlparser::/) sq += p
                else if (line ~ /riptide_server::/) pr += p
                else if (line ~ / riptide::/) en += p
                else if (line ~ /tokio::|mio::/) rt += p
                else if (line ~ /malloc|free|memmove|memcpy|memset|memcmp|_int_|realloc|cfree|unlink_chunk/) lc += p
                else ot += p
            }
            END { printf "| %s | %s | %s | %.0f %% | %.0f %% | %.0f %% | %.0f %% | %.0f %% | %.0f %% | %.0f %% |\n", test, tps, per, k, pr, sq, en, rt, lc, ot }' \
        >> "$OUT/profile.md"
done
cat "$OUT/profile.md"
