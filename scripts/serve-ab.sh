#!/usr/bin/env bash
# A/B helper for `riptide serve`: starts a fresh server from BIN, prepares 4 x SIZE rows with
# stock sysbench, waits SETTLE s, runs each TEST for TIME s at THREADS clients, and prints
# tps, the server's CPU µs per query (/proc/PID/stat) and its context switches per query
# (/proc/PID/task/*/status). Run two binaries alternately (A B A B A B) and take medians.
#
#   scripts/serve-ab.sh BIN THREADS TEST...
#
# Environment: SYNC (1) SIZE (100000) SETTLE (5) TIME (8) EXTRA (more `riptide serve` flags).
set -u
BIN=$1; TH=$2; shift 2
PORT=3355; DIR=$(mktemp -d /tmp/ctx.XXXX)
$BIN serve --data-dir $DIR/data --listen 127.0.0.1:$PORT --sync ${SYNC:-1} --create-database sbtest ${EXTRA:-} > $DIR/out 2>&1 &
PID=$!
for _ in $(seq 100); do grep -q 'listening on' $DIR/out && break; sleep 0.1; done
SB=(--db-driver=mysql --mysql-host=127.0.0.1 --mysql-port=$PORT --mysql-user=root --mysql-password= --mysql-db=sbtest --tables=4 --table-size=${SIZE:-100000})
sysbench oltp_read_write "${SB[@]}" --threads=4 prepare >/dev/null
sleep ${SETTLE:-5}
ctx() { cat /proc/$PID/task/*/status | awk '/_ctxt_switches/ {s+=$2} END {print s}'; }
for t in "$@"; do
  c0=$(awk '{print $14+$15}' /proc/$PID/stat); x0=$(ctx)
  sysbench $t "${SB[@]}" --threads=$TH --time=${TIME:-8} run > $DIR/$t.out
  c1=$(awk '{print $14+$15}' /proc/$PID/stat); x1=$(ctx)
  q=$(awk '/queries:/ && !/performed/ {gsub(/\(/,"",$3); print $3}' $DIR/$t.out)
  tps=$(awk '/transactions:/ {gsub(/\(/,"",$3); print $3}' $DIR/$t.out)
  awk -v t=$t -v tps=$tps -v q=$q -v c=$((c1-c0)) -v x=$((x1-x0)) -v T=${TIME:-8} 'BEGIN {printf "%-22s tps %9.0f  cpu %6.1f us/q  ctxsw %5.2f /q  threads\n", t, tps, c/100*1e6/(q*T), x/(q*T)}'
done
ls /proc/$PID/task | wc -l
kill $PID; wait $PID; rm -rf $DIR
