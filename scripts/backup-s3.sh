#!/usr/bin/env bash
# Backups to an S3-compatible server: `riptide backup create`, `verify` and `restore` of one
# database against moto (started here, on loopback, from the virtual environment that
# scripts/setup.sh makes), one request at a time against PARALLEL requests, with each request
# delayed by 0 and LATENCY_MS milliseconds through the latency proxy. Then an incremental
# backup after WRITES overwrites. Alternating, REPS runs, medians.
#
#   scripts/backup-s3.sh OUT
#
# Environment (defaults): NUM=2000000 KEY_SIZE=16 VALUE_SIZE=100 LATENCY_MS=20 PARALLEL=8
# WRITES=20000 REPS=3 RIPTIDE=target/release/riptide. Report: OUT/report.md, logs in OUT/logs.
set -euo pipefail

OUT=${1:?usage: scripts/backup-s3.sh OUT}
NUM=${NUM:-2000000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-100}
LATENCY_MS=${LATENCY_MS:-20}
PARALLEL=${PARALLEL:-8}
WRITES=${WRITES:-20000}
REPS=${REPS:-3}
RIPTIDE=${RIPTIDE:-target/release/riptide}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$ROOT/target/venv/bin/python"

[[ -x "$RIPTIDE" ]] || { echo "no $RIPTIDE: cargo build --release -p riptide-cli" >&2; exit 1; }
[[ -x "$PY" ]] || { echo "no $PY: run scripts/setup.sh" >&2; exit 1; }
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
report="$OUT/report.md"

# shellcheck source=lib/moto.sh
source "$ROOT/scripts/lib/moto.sh"
start_moto "$OUT/logs"
port=$MOTO_PORT
trap 'kill $MOTO_PID 2>/dev/null || true; rm -rf "$OUT/db" "$OUT/restored"' EXIT
# Wall seconds of a command, its output in log $1.
timed() {
    local log=$1
    shift
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >"$log" 2>&1
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'
}

db="$OUT/db"
rm -rf -- "$db"
"$RIPTIDE" bench --benchmarks=fillrandom "--num=$NUM" "--key_size=$KEY_SIZE" "--value_size=$VALUE_SIZE" \
    --seed=1 "--db=$db" >"$OUT/logs/fill.log" 2>&1
size=$(du -sb "$db" | cut -f1)

declare -A CREATE VERIFY RESTORE INCR
for rep in $(seq 1 "$REPS"); do
    for lat in 0 "$LATENCY_MS"; do
        for par in 1 "$PARALLEL"; do
            k="$lat $par"
            store=("--backups=s3://riptide/r$rep-l$lat-p$par" "--backup_endpoint=http://127.0.0.1:$port"
                   "--backup_latency_ms=$lat" "--parallel_requests=$par")
            echo "[$rep/$REPS] latency $lat ms, $par request(s) at once" >&2
            CREATE[$k]+="$(timed "$OUT/logs/create-$rep-$lat-$par.log" "$RIPTIDE" backup create "--db=$db" "${store[@]}") "
            VERIFY[$k]+="$(timed "$OUT/logs/verify-$rep-$lat-$par.log" "$RIPTIDE" backup verify --id=1 "${store[@]}") "
            rm -rf -- "$OUT/restored"
            RESTORE[$k]+="$(timed "$OUT/logs/restore-$rep-$lat-$par.log" "$RIPTIDE" backup restore --id=1 \
                "--db=$OUT/restored" "${store[@]}") "
        done
    done
done
# Incremental: after WRITES overwrites, a second backup into each store of the first run.
"$RIPTIDE" bench --use_existing_db=1 --benchmarks=overwrite "--writes=$WRITES" "--num=$NUM" \
    "--key_size=$KEY_SIZE" "--value_size=$VALUE_SIZE" --seed=2 "--db=$db" >"$OUT/logs/overwrite.log" 2>&1
for lat in 0 "$LATENCY_MS"; do
    for par in 1 "$PARALLEL"; do
        INCR["$lat $par"]=$(timed "$OUT/logs/incremental-$lat-$par.log" "$RIPTIDE" backup create "--db=$db" \
            "--backups=s3://riptide/r1-l$lat-p$par" "--backup_endpoint=http://127.0.0.1:$port" \
            "--backup_latency_ms=$lat" "--parallel_requests=$par")
    done
done

{
    echo "# Backups to an S3-compatible server (moto on loopback)"
    echo
    echo "$NUM keys of $KEY_SIZE B / $VALUE_SIZE B (fillrandom, seed 1), database $size bytes on disk;"
    echo "wall seconds of each whole command (start, open, transfer, close), medians of $REPS alternating runs;"
    echo "each request delayed by the given latency through the loopback latency proxy."
    echo "$(grep -m1 'uploaded in' "$OUT/logs/create-1-0-1.log")"
    echo
    echo "| latency per request | requests at once | create s | verify s | restore s | incremental create after $WRITES overwrites s (1 run) |"
    echo "|---:|---:|---:|---:|---:|---:|"
    for lat in 0 "$LATENCY_MS"; do
        for par in 1 "$PARALLEL"; do
            k="$lat $par"
            echo "| $lat ms | $par | $(echo "${CREATE[$k]}" | tr ' ' '\n' | grep . | median) |" \
                "$(echo "${VERIFY[$k]}" | tr ' ' '\n' | grep . | median) |" \
                "$(echo "${RESTORE[$k]}" | tr ' ' '\n' | grep . | median) | ${INCR[$k]} |"
        done
    done
    echo
    echo "Incremental backup (latency $LATENCY_MS ms, $PARALLEL at once): $(grep -m1 'uploaded in' "$OUT/logs/incremental-$LATENCY_MS-$PARALLEL.log")"
} >"$report"
cat "$report"
