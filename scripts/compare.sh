#!/usr/bin/env bash
# Side-by-side engine comparison: runs a matrix of `riptide bench` workloads on several engines,
# alternating engines inside each repetition (A B A B ...), and prints a markdown report with the
# median ops/sec per engine, the ratios riptide/peer, the database size on disk after each run,
# every single run, each engine's statistics, the machine facts and the exact command lines.
#
# Build the engines first (RocksDB compiles from C++ source; reuse the target/peers cache):
#   CARGO_TARGET_DIR=target/peers cargo build --release -p riptide-cli --features bench-rocksdb,bench-fjall
#
# Usage: scripts/compare.sh            (settings from the environment, defaults below)
#   BENCHMARKS="fillrandom readrandom"  workloads (comma or space separated): any riptide bench name,
#                                       or several joined by + to run in one process, e.g.
#                                       fillrandom+flush+waitforcompaction+readrandom+stats
#                                       (its result is the last benchmark that is not a meta
#                                       operation: flush, compact, waitforcompaction, stats, levelstats)
#   THREADS="1"                         thread counts
#   SYNC="0"                            --sync values
#   NUM=200000                          key space (--num)
#   DURATION=0                          seconds per random-key run; 0 = op counts (see below)
#   REPS=3                              repetitions per engine (at least 3 for a median)
#   ENGINES="riptide rocksdb"           riptide, riptide-base (riptide from the $RIPTIDE_BASE binary: a
#                                       baseline build, to measure a change A B A B against it),
#                                       riptide-asyncN (riptide with --async_commit_depth=N;
#                                       its prefill is synchronous), riptide-noprealloc (riptide with
#                                       --redo_preallocate=false), rocksdb, fjall, and db_bench78 (Debian's db_bench,
#                                       RocksDB 7.8.3, assertions enabled; flags as in
#                                       shared/anchors/rocksdb_dbbench.sh)
#   PREFILL=fillrandom,flush,waitforcompaction
#                                       what fills the database before a workload that does not start
#                                       with a fill (comma-separated benchmarks, one process)
#   Engine settings, the same for every engine, prefill and measured run (db_bench's flags):
#   KEY_SIZE=16 VALUE_SIZE=100          --key_size, --value_size
#   CACHE_SIZE=8388608                  --cache_size (block cache bytes; db_bench's default)
#   ROW_CACHE_SIZE=0                    --row_cache_size (row cache bytes; fjall refuses anything but 0)
#   COMPRESSION=none                    --compression_type (none or lz4; zstd: rocksdb, db_bench78)
#   BLOCK_SIZE=16384 BLOOM_BITS=10      --block_size, --bloom_bits
#   WRITE_BUFFER_SIZE=67108864          --write_buffer_size
#   READ_RANDOM_EXP_RANGE=0             --read_random_exp_range (skewed readrandom keys; 0 = uniform)
#   EXTRA_FLAGS=""                      more flags for every measured run, every engine (appended last:
#                                       a flag given again overrides the settings above)
#   PREFILL_FLAGS=""                    more flags for every prefill run, every engine
#   RIPTIDE=target/peers/release/riptide   the feature binary
#   RIPTIDE_BASE=target/base/release/riptide   the baseline binary of engine riptide-base
#   DB_BENCH=db_bench                   Debian's db_bench, for db_bench78
#   OUT=bench-data/compare              where databases, logs and report.md go
#
# Rules:
# - A workload that starts with fillseq or fillrandom runs on a fresh database in one process.
#   Any other workload first fills a fresh database with PREFILL (1 thread, --num=NUM,
#   --seed=SEED; by default it then flushes and waits for compactions, so the measured run starts
#   from a quiet LSM-tree on every engine), then runs on it in a new process with
#   --use_existing_db=1 and --seed=SEED+1000 (as the RocksDB anchor does, so reader 1 does not
#   replay the fill's key sequence).
# - Without DURATION, every benchmark of a workload does NUM operations in total (NUM/threads per
#   thread: --writes, --reads, --deletes). With DURATION, random-key workloads run that long
#   (fillseq and readseq/readreverse ignore it, as in db_bench).
# - Each run gets a fresh directory under OUT; its size on disk (du, allocated blocks) is taken
#   after the run, then it is deleted; its output is kept in OUT/logs-<time>/.
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
PREFILL=${PREFILL:-fillrandom,flush,waitforcompaction}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
PREFILL_FLAGS=${PREFILL_FLAGS:-}
RIPTIDE=${RIPTIDE:-target/peers/release/riptide}
RIPTIDE_BASE=${RIPTIDE_BASE:-target/base/release/riptide}
DB_BENCH=${DB_BENCH:-db_bench}
OUT=${OUT:-bench-data/compare}
SEED=${SEED:-1}
RSEED=$((SEED + 1000))
# Settings every engine gets (the bench's defaults, spelled out for db_bench).
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-100}
CACHE_SIZE=${CACHE_SIZE:-8388608}
ROW_CACHE_SIZE=${ROW_CACHE_SIZE:-0}
COMPRESSION=${COMPRESSION:-none}
BLOCK_SIZE=${BLOCK_SIZE:-16384}
BLOOM_BITS=${BLOOM_BITS:-10}
WRITE_BUFFER_SIZE=${WRITE_BUFFER_SIZE:-67108864}
READ_RANDOM_EXP_RANGE=${READ_RANDOM_EXP_RANGE:-0}

die() { echo "compare.sh: $*" >&2; exit 1; }
[[ "$REPS" =~ ^[0-9]+$ && "$REPS" -ge 1 ]] || die "REPS must be a positive number"
[[ "$REPS" -ge 3 ]] || echo "compare.sh: warning: REPS=$REPS; use at least 3 for a meaningful median" >&2
for e in $ENGINES; do
    case $e in
        riptide | riptide-async[1-9]* | riptide-noprealloc | rocksdb | fjall)
            [[ -x "$RIPTIDE" ]] || die "$RIPTIDE not found; build it with: CARGO_TARGET_DIR=target/peers cargo build --release -p riptide-cli --features bench-rocksdb,bench-fjall"
            ;;
        riptide-base) [[ -x "$RIPTIDE_BASE" ]] || die "$RIPTIDE_BASE not found (the baseline build of engine riptide-base)" ;;
        db_bench78) command -v "$DB_BENCH" >/dev/null || die "db_bench not found (Debian package rocksdb-tools)" ;;
        *) die "unknown engine $e (riptide, riptide-base, riptide-asyncN, riptide-noprealloc, rocksdb, fjall, db_bench78)" ;;
    esac
done

STAMP=$(date +%Y%m%d-%H%M%S)
LOGS="$OUT/logs-$STAMP"
mkdir -p "$LOGS"
RUNS="$LOGS/runs.tsv"     # engine workload threads sync rep ops/sec db-bytes cores-busy
CMDS="$LOGS/commands.txt"
: >"$RUNS"
: >"$CMDS"

# True if workload $1 (benchmarks joined by +) starts with a fill, so it needs no prefill.
is_fill() { [[ ${1%%+*} == fillseq || ${1%%+*} == fillrandom ]]; }

# The benchmark whose result line measures workload $1: its last one that is not a meta operation.
measured_of() {
    local b last=
    for b in ${1//+/ }; do
        case $b in
            flush | compact | waitforcompaction | stats | levelstats) ;;
            *) last=$b ;;
        esac
    done
    echo "${last:-${1##*+}}"
}

# The command line of one run of engine $1 on directory $2 with benchmark list $3, threads $4,
# sync $5, seed $6, then extra flags; printed one word per line (so paths with spaces survive).
command_for() {
    local engine=$1 db=$2 list=$3 threads=$4 sync=$5 seed=$6
    shift 6
    local common=(--db="$db" --benchmarks="$list" --num="$NUM" --threads="$threads" --sync="$sync"
        --seed="$seed" --key_size="$KEY_SIZE" --value_size="$VALUE_SIZE" --cache_size="$CACHE_SIZE"
        --row_cache_size="$ROW_CACHE_SIZE" --block_size="$BLOCK_SIZE" --bloom_bits="$BLOOM_BITS"
        --write_buffer_size="$WRITE_BUFFER_SIZE" --compression_type="$COMPRESSION"
        --read_random_exp_range="$READ_RANDOM_EXP_RANGE" "$@")
    case $engine in
        riptide | rocksdb | fjall) printf '%s\n' "$RIPTIDE" bench --engine="$engine" "${common[@]}" ;;
        riptide-base) printf '%s\n' "$RIPTIDE_BASE" bench --engine=riptide "${common[@]}" ;;
        riptide-async*) printf '%s\n' "$RIPTIDE" bench --engine=riptide "${common[@]}" \
            --async_commit_depth="${engine#riptide-async}" ;;
        riptide-noprealloc) printf '%s\n' "$RIPTIDE" bench --engine=riptide "${common[@]}" --redo_preallocate=false ;;
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

# Like run_logged, and appends the run's CPU use to file $2: the cores it kept busy on average,
# (user + system CPU seconds) / wall seconds of the whole process.
run_timed() {
    local log=$1 cpu=$2 cmd=() rc TIMEFORMAT='%R %U %S'
    mapfile -t cmd
    echo "${cmd[*]}" >>"$CMDS"
    { time "${cmd[@]}" >"$log" 2>&1; } 2>"$cpu.time"
    rc=$?
    awk '{ if ($1 > 0) printf "%.2f\n", ($2 + $3) / $1; else print "NA" }' "$cpu.time" >"$cpu"
    rm -f -- "$cpu.time"
    return $rc
}

# ops/sec of benchmark $1 in log $2 (db_bench's result line: "name : X micros/op Y ops/sec ...");
# the last such line if the workload runs it more than once (warm-up first).
ops_of() {
    awk -v b="$1" '$1 == b && $2 == ":" && $4 == "micros/op" { v = $5 } END { if (v != "") print v }' "$2"
}

# Runs workload $2 with threads $3 and sync $4 on engine $1, repetition $5; records ops/sec and
# the database's size on disk after the run.
measure() {
    local engine=$1 bench=$2 threads=$3 sync=$4 rep=$5
    local tag="$engine-${bench//+/-}-t$threads-s$sync-r$rep"
    local db="$OUT/db-$tag"
    rm -rf -- "$db"
    local per=$((NUM / threads))
    ((per > 0)) || per=1
    local extra=() prefill_extra=()
    # shellcheck disable=SC2206
    extra=($EXTRA_FLAGS)
    # shellcheck disable=SC2206
    prefill_extra=($PREFILL_FLAGS)
    [[ "$DURATION" != 0 ]] && extra+=(--duration="$DURATION")
    local list=${bench//+/,} seed=$SEED
    if is_fill "$bench"; then
        if [[ $bench == *+* ]]; then
            extra=(--writes="$per" --reads="$per" --deletes="$per" "${extra[@]}")
        else
            extra=(--writes="$per" "${extra[@]}")
        fi
    else
        command_for "$engine" "$db" "$PREFILL" 1 0 "$SEED" --writes="$NUM" "${prefill_extra[@]}" |
            run_logged "$LOGS/$tag.prefill.log" || {
            echo "compare.sh: prefill failed, see $LOGS/$tag.prefill.log" >&2
            rm -rf -- "$db"
            return 1
        }
        extra=(--use_existing_db=1 --reads="$per" --writes="$per" --deletes="$per" "${extra[@]}")
        seed=$RSEED
    fi
    local log="$LOGS/$tag.log" ops size=NA cores=NA
    if command_for "$engine" "$db" "$list" "$threads" "$sync" "$seed" "${extra[@]}" | run_timed "$log" "$LOGS/$tag.cpu"; then
        ops=$(ops_of "$(measured_of "$bench")" "$log")
    fi
    [[ -s "$LOGS/$tag.cpu" ]] && cores=$(cat "$LOGS/$tag.cpu")
    [[ -d "$db" ]] && size=$(du -sB1 -- "$db" | cut -f1)
    rm -rf -- "$db"
    if [[ -z "${ops:-}" ]]; then
        echo "compare.sh: $tag failed, see $log" >&2
        ops=NA
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$engine" "$bench" "$threads" "$sync" "$rep" "$ops" "$size" "$cores" >>"$RUNS"
    printf '  %-10s %-16s threads=%-3s sync=%s rep=%s: %s ops/sec, %s bytes on disk, %s cores busy\n' "$engine" "$bench" \
        "$threads" "$sync" "$rep" "$ops" "$size" "$cores" >&2
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
median_real() { # numbers on stdin (NA ignored) -> median with two decimals, or NA
    sort -g | awk '$1 != "NA" { v[n++] = $1 } END {
        if (n == 0) { print "NA"; exit }
        if (n % 2) printf "%.2f\n", v[(n - 1) / 2]; else printf "%.2f\n", (v[n / 2 - 1] + v[n / 2]) / 2 }'
}
values() { # engine bench threads sync [column] -> the ops/sec (or column $5) of every rep, in order
    awk -F'\t' -v e="$1" -v b="$2" -v t="$3" -v s="$4" -v c="${5:-6}" \
        '$1 == e && $2 == b && $3 == t && $4 == s { print $c }' "$RUNS"
}

# A table of column $1 of runs.tsv (median per engine, each printed through awk program $3),
# one row per workload, threads and sync; $2 names the unit in the header.
per_engine_table() {
    local column=$1 unit=$2 format=$3 header="| workload | threads | sync |" rule="|---|---:|---:|" row
    for e in $ENGINES; do header+=" $e $unit |"; rule+="---:|"; done
    echo "$header"
    echo "$rule"
    for bench in $BENCHMARKS; do
        for threads in $THREADS; do
            for sync in $SYNC; do
                row="| $bench | $threads | $sync |"
                for e in $ENGINES; do
                    row+=" $(values "$e" "$bench" "$threads" "$sync" "$column" | median_real | awk "$format") |"
                done
                echo "$row"
            done
        done
    done
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
    echo "NUM=$NUM, DURATION=$DURATION, key $KEY_SIZE B, value $VALUE_SIZE B, block cache $CACHE_SIZE B, row cache $ROW_CACHE_SIZE B, compression $COMPRESSION, block $BLOCK_SIZE B, bloom bits $BLOOM_BITS, write buffer $WRITE_BUFFER_SIZE B, read_random_exp_range $READ_RANDOM_EXP_RANGE; prefill for workloads that do not start with a fill: $PREFILL. Extra flags: measured [${EXTRA_FLAGS}], prefill [${PREFILL_FLAGS}]. Total wall time ${WALL}s."
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
    echo "Database size on disk after each run (du of the directory once the process has exited: allocated MB, median of $REPS runs):"
    echo
    per_engine_table 7 MB '{ if ($1 == "NA") print "NA"; else printf "%.1f", $1 / 1048576 }'
    echo
    echo "CPU use of each measured run (cores kept busy: user + system CPU seconds over the process's wall seconds, prefill excluded; median of $REPS runs; $(nproc) cores):"
    echo
    per_engine_table 8 cores '{ if ($1 == "NA") print "NA"; else printf "%.2f", $1 }'
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
    echo "Engine statistics at the end of each engine's first run (riptide bench prints them; db_bench78 prints none):"
    echo
    echo '```'
    for e in $ENGINES; do
        [[ $e == db_bench78 ]] && continue
        first=$(ls "$LOGS"/"$e"-*.log 2>/dev/null | grep -v prefill | head -1 || true)
        [[ -n "$first" ]] || continue
        echo "[$e] $(basename "$first")"
        grep -E '^(Riptide stats|RocksDB stats|fjall stats|DB size on disk)' "$first" || true
        grep -E '^(flush|compact|waitforcompaction) +:' "$first" || true
    done
    echo '```'
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
