#!/usr/bin/env bash
# Side-by-side engine comparison: runs a matrix of `riptide bench` workloads on several engines,
# alternating engines inside each repetition (A B A B ...), and prints a markdown report with the
# median ops/sec per engine, the ratios riptide/peer, every single run, the machine facts and
# the exact command lines.
#
# Build the engines first (RocksDB compiles from C++ source; reuse the target/peers cache):
#   CARGO_TARGET_DIR=target/peers cargo build --release -p riptide-cli --features bench-rocksdb,bench-fjall
#
# Usage: scripts/compare.sh            (settings from the environment, defaults below)
#   BENCHMARKS="fillrandom readrandom"  workloads (comma or space separated); any riptide bench name
#   THREADS="1"                         thread counts
#   SYNC="0"                            --sync values
#   NUM=200000                          key space (--num)
#   DURATION=0                          seconds per random-key run; 0 = op counts (see below)
#   REPS=3                              repetitions per engine (at least 3 for a median)
#   ENGINES="riptide rocksdb"           riptide, riptide-asyncN (riptide with --async_commit_depth=N;
#                                       its prefill is synchronous), rocksdb, fjall, and db_bench78 (Debian's db_bench,
#                                       RocksDB 7.8.3, assertions enabled; flags as in
#                                       shared/anchors/rocksdb_dbbench.sh)
#   PREFILL=fillrandom                  what fills the database before a non-fill workload
#   EXTRA_FLAGS=""                      more flags for every measured run, every engine
#   RIPTIDE=target/peers/release/riptide   the feature binary
#   DB_BENCH=db_bench                   Debian's db_bench, for db_bench78
#   OUT=bench-data/compare              where databases, logs and report.md go
#
# Rules:
# - fillseq and fillrandom run on a fresh database in one process. Any other workload first
#   fills a fresh database with PREFILL (1 thread, --num=NUM, --seed=SEED), then runs on it in a
#   new process with --use_existing_db=1 and --seed=SEED+1000 (as the RocksDB anchor does, so
#   reader 1 does not replay the fill's key sequence).
# - Without DURATION, fills write NUM/threads keys per thread and reads do NUM/threads reads per
#   thread, so every run does NUM operations in total. With DURATION, random-key workloads run
#   that long (fillseq and readseq/readreverse ignore it, as in db_bench).
# - Each run gets a fresh directory under OUT, deleted after the run; its output is kept in
#   OUT/logs-<time>/.
# - The first engine of ENGINES is the base of the ratios (base/peer: above 1 = base is faster).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi

split() { echo "${1//,/ }"; }
BENCHMARKS=$(split "${BENCHMARKS:-fillrandom readrandom}")
THREADS=$(split "${THREADS:-1}")
SYNC=$(split "${SYNC:-0}")
NUM=${NUM:-200000}
DURATION=${DURATION:-0}
REPS=${REPS:-3}
ENGINES=$(split "${ENGINES:-riptide rocksdb}")
PREFILL=${PREFILL:-fillrandom}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
RIPTIDE=${RIPTIDE:-target/peers/release/riptide}
DB_BENCH=${DB_BENCH:-db_bench}
OUT=${OUT:-bench-data/compare}
SEED=${SEED:-1}
RSEED=$((SEED + 1000))
# Settings every engine gets (the bench's defaults, spelled out for db_bench).
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-100}
CACHE_SIZE=${CACHE_SIZE:-8388608}
BLOCK_SIZE=16384
BLOOM_BITS=10
WRITE_BUFFER_SIZE=${WRITE_BUFFER_SIZE:-67108864}

die() { echo "compare.sh: $*" >&2; exit 1; }
[[ "$REPS" =~ ^[0-9]+$ && "$REPS" -ge 1 ]] || die "REPS must be a positive number"
[[ "$REPS" -ge 3 ]] || echo "compare.sh: warning: REPS=$REPS; use at least 3 for a meaningful median" >&2
for e in $ENGINES; do
    case $e in
        riptide | riptide-async[1-9]* | rocksdb | fjall)
            [[ -x "$RIPTIDE" ]] || die "$RIPTIDE not found; build it with: CARGO_TARGET_DIR=target/peers cargo build --release -p riptide-cli --features bench-rocksdb,bench-fjall"
            ;;
        db_bench78) command -v "$DB_BENCH" >/dev/null || die "db_bench not found (Debian package rocksdb-tools)" ;;
        *) die "unknown engine $e (riptide, riptide-asyncN, rocksdb, fjall, db_bench78)" ;;
    esac
done

STAMP=$(date +%Y%m%d-%H%M%S)
LOGS="$OUT/logs-$STAMP"
mkdir -p "$LOGS"
RUNS="$LOGS/runs.tsv"     # engine workload threads sync rep ops/sec
CMDS="$LOGS/commands.txt"
: >"$RUNS"
: >"$CMDS"

is_fill() { [[ $1 == fillseq || $1 == fillrandom ]]; }

# The command line of one run of engine $1 on directory $2 with benchmark list $3, threads $4,
# sync $5, seed $6, then extra flags; printed one word per line (so paths with spaces survive).
command_for() {
    local engine=$1 db=$2 list=$3 threads=$4 sync=$5 seed=$6
    shift 6
    local common=(--db="$db" --benchmarks="$list" --num="$NUM" --threads="$threads" --sync="$sync"
        --seed="$seed" --key_size=$KEY_SIZE --value_size=$VALUE_SIZE --cache_size="$CACHE_SIZE"
        --block_size=$BLOCK_SIZE --bloom_bits=$BLOOM_BITS --write_buffer_size="$WRITE_BUFFER_SIZE"
        --compression_type=none "$@")
    case $engine in
        riptide | rocksdb | fjall) printf '%s\n' "$RIPTIDE" bench --engine="$engine" "${common[@]}" ;;
        riptide-async*) printf '%s\n' "$RIPTIDE" bench --engine=riptide "${common[@]}" \
            --async_commit_depth="${engine#riptide-async}" ;;
        db_bench78) printf '%s\n' "$DB_BENCH" "${common[@]}" ;;
    esac
}

# Runs one command (given one word per line on stdin), logging its output to $1; returns its rc.
run_logged() {
    local log=$1 cmd=()
    mapfile -t cmd
    echo "${cmd[*]}" >>"$CMDS"
    "${cmd[@]}" >"$log" 2>&1
}

# ops/sec of benchmark $1 in log $2 (db_bench's result line: "name : X micros/op Y ops/sec ...").
ops_of() {
    awk -v b="$1" '$1 == b && $2 == ":" && $4 == "micros/op" { print $5; exit }' "$2"
}

# Runs workload $2 with threads $3 and sync $4 on engine $1, repetition $5; records ops/sec.
measure() {
    local engine=$1 bench=$2 threads=$3 sync=$4 rep=$5
    local tag="$engine-$bench-t$threads-s$sync-r$rep"
    local db="$OUT/db-$tag"
    rm -rf -- "$db"
    local per=$((NUM / threads))
    ((per > 0)) || per=1
    local extra=()
    # shellcheck disable=SC2206
    extra=($EXTRA_FLAGS)
    [[ "$DURATION" != 0 ]] && extra+=(--duration="$DURATION")
    local list=$bench seed=$SEED
    if is_fill "$bench"; then
        extra+=(--writes="$per")
    else
        command_for "$engine" "$db" "$PREFILL" 1 0 "$SEED" --writes="$NUM" |
            run_logged "$LOGS/$tag.prefill.log" || {
            echo "compare.sh: prefill failed, see $LOGS/$tag.prefill.log" >&2
            rm -rf -- "$db"
            return 1
        }
        extra+=(--use_existing_db=1 --reads="$per" --writes="$per" --deletes="$per")
        seed=$RSEED
    fi
    local log="$LOGS/$tag.log" ops
    if command_for "$engine" "$db" "$list" "$threads" "$sync" "$seed" "${extra[@]}" | run_logged "$log"; then
        ops=$(ops_of "$bench" "$log")
    fi
    rm -rf -- "$db"
    if [[ -z "${ops:-}" ]]; then
        echo "compare.sh: $tag failed, see $log" >&2
        ops=NA
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$engine" "$bench" "$threads" "$sync" "$rep" "$ops" >>"$RUNS"
    printf '  %-10s %-16s threads=%-3s sync=%s rep=%s: %s ops/sec\n' "$engine" "$bench" "$threads" "$sync" "$rep" "$ops" >&2
}

T0=$(date +%s)
echo "compare.sh: engines [$ENGINES], workloads [$BENCHMARKS], threads [$THREADS], sync [$SYNC], num $NUM, duration $DURATION, $REPS reps; logs in $LOGS" >&2
for bench in $BENCHMARKS; do
    for threads in $THREADS; do
        for sync in $SYNC; do
            for ((rep = 1; rep <= REPS; rep++)); do
                for engine in $ENGINES; do
                    measure "$engine" "$bench" "$threads" "$sync" "$rep" || true
                done
            done
        done
    done
done
WALL=$(($(date +%s) - T0))

median() { # numbers on stdin (NA ignored) -> median, or NA
    sort -g | awk '$1 != "NA" { v[n++] = $1 } END {
        if (n == 0) { print "NA"; exit }
        if (n % 2) printf "%.0f\n", v[(n - 1) / 2]; else printf "%.0f\n", (v[n / 2 - 1] + v[n / 2]) / 2 }'
}
values() { # engine bench threads sync -> the ops/sec of every rep, in order
    awk -F'\t' -v e="$1" -v b="$2" -v t="$3" -v s="$4" '$1 == e && $2 == b && $3 == t && $4 == s { print $6 }' "$RUNS"
}

set -- $ENGINES
BASE=$1
shift
PEERS=("$@")
REPORT="$LOGS/report.md"
{
    echo "## Engine comparison ($(date -Is))"
    echo
    echo "Median ops/sec of $REPS runs per engine, engines alternating within each repetition; ratio = $BASE / peer (above 1: $BASE is faster)."
    echo "NUM=$NUM, DURATION=$DURATION, key $KEY_SIZE B, value $VALUE_SIZE B, prefill for non-fill workloads: $PREFILL. Total wall time ${WALL}s."
    echo
    header="| workload | threads | sync |"
    rule="|---|---:|---:|"
    for e in $ENGINES; do header+=" $e ops/s |"; rule+="---:|"; done
    for p in "${PEERS[@]}"; do header+=" $BASE/$p |"; rule+="---:|"; done
    echo "$header"
    echo "$rule"
    for bench in $BENCHMARKS; do
        for threads in $THREADS; do
            for sync in $SYNC; do
                row="| $bench | $threads | $sync |"
                declare -A med=()
                for e in $ENGINES; do
                    med[$e]=$(values "$e" "$bench" "$threads" "$sync" | median)
                    row+=" ${med[$e]} |"
                done
                for p in "${PEERS[@]}"; do
                    row+=" $(awk -v a="${med[$BASE]}" -v b="${med[$p]}" 'BEGIN {
                        if (a == "NA" || b == "NA" || b == 0) print "NA"; else printf "%.2f", a / b }') |"
                done
                unset med
                echo "$row"
            done
        done
    done
    echo
    echo "Every run (ops/sec, in run order):"
    echo
    echo "| workload | threads | sync | engine | runs |"
    echo "|---|---:|---:|---|---|"
    for bench in $BENCHMARKS; do
        for threads in $THREADS; do
            for sync in $SYNC; do
                for e in $ENGINES; do
                    echo "| $bench | $threads | $sync | $e | $(values "$e" "$bench" "$threads" "$sync" | paste -sd' ') |"
                done
            done
        done
    done
    echo
    echo "Machine:"
    echo
    echo "- nproc: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "- memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo); kernel: $(uname -r); OS: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}")"
    echo "- disk of $OUT: $(df -h "$OUT" | awk 'NR == 2 {print $1 ", " $2 " total, " $4 " free"}'); $(findmnt -n -T "$OUT" -o FSTYPE,OPTIONS 2>/dev/null || echo "fs unknown")"
    echo "- load average before the report: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- riptide: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)'), binary $RIPTIDE"
    for e in $ENGINES; do
        case $e in
            db_bench78) echo "- db_bench78: $("$DB_BENCH" --version 2>&1 | head -1) (Debian build, assertions enabled)" ;;
            *)
                first=$(ls "$LOGS"/"$e"-*.log 2>/dev/null | grep -v prefill | head -1 || true)
                [[ -n "$first" ]] && echo "- $e: $(grep -m1 '^Engine: ' "$first" | sed 's/^Engine: *//')"
                ;;
        esac
    done
    echo
    echo "Engine options (from each engine's first run; every run prints them):"
    echo
    echo '```'
    for e in $ENGINES; do
        [[ $e == db_bench78 ]] && continue
        first=$(ls "$LOGS"/"$e"-*.log 2>/dev/null | grep -v prefill | head -1 || true)
        [[ -n "$first" ]] || continue
        echo "[$e]"
        awk '/^Engine options:/ { on = 1; next } on && /^  / { print; next } on { exit }' "$first"
    done
    echo '```'
    echo
    echo "Commands, in the order run:"
    echo
    echo '```'
    cat "$CMDS"
    echo '```'
} >"$REPORT"
cat "$REPORT"
echo "compare.sh: report saved to $REPORT" >&2
