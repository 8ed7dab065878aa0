#!/usr/bin/env bash
# Many-core check: Riptide against RocksDB (and riptide-async16 for sync writes) on the 16-core
# machine, through scripts/compare.sh (engines alternate A B A B; medians; cores kept busy), plus
# `vmstat 1` during a 64-thread Zipfian xbench of each engine. Builds nothing; about 7 minutes on
# 16 cores (estimate per block printed before it runs; total wall time printed at the end).
#
# Build the peer-enabled binary once, then strip its debug info into an ignored folder (the
# stripped binary stays under 64 MiB, small enough to carry to the 16-core machine):
#   CARGO_TARGET_DIR=target/peers cargo build --release -p riptide-cli --features bench-rocksdb,bench-fjall
#   mkdir -p target/device && strip -o target/device/riptide target/peers/release/riptide
#   RIPTIDE=target/device/riptide scripts/many-core.sh bench-data/many-core
#
# Usage: scripts/many-core.sh [REPORT_DIR]      (default bench-data/many-core)
#   RIPTIDE=target/peers/release/riptide   the peer-enabled binary
#   REPS=3                      repetitions of the headline rows (fillrandom sync=0 at 1/16/64
#                               threads, sync=1 at 64, readrandom at 16, zipf xbench at 64), DURATION=5
#   REPS2=1 DURATION2=4         repetitions and seconds of the secondary rows (fillrandom at 4 threads,
#                               readrandom at 64, zipf xbench at 1/16/256, uniform xbench at 64);
#                               their report sections are marked "1 run" when REPS2=1
#   WORK=${TMPDIR:-/tmp}/many-core   where compare.sh puts its databases (deleted after each run)
#   DRY_RUN=1                   print every compare.sh invocation (environment and command) and the
#                               vmstat runs, with the time estimate, instead of running them
#   AB=1                        also ten A/B blocks of Riptide against itself with one feature switched
#                               (engine riptide-base = the same binary with an extra flag), REPS2
#                               runs each, about 5 more minutes: early lock release
#                               (xbench zipf at 64 threads, --early_lock_release=false), pointer
#                               swizzling (readrandom warm at 16 threads, --block_swizzling=false),
#                               parallel insertion (fillrandom at 16 threads,
#                               --parallel_insert_helpers=0) and polling waiters (xbench zipf and
#                               fillrandom at 64 threads, --write_wait_spin_micros=0); at 64
#                               threads of fillrandom, the two options that are off by default turned
#                               on in riptide-base: adaptive polling (--write_wait_adaptive=true) and the
#                               commit hand-off (--driver_commit_groups=4, also xbench zipf at 16 and 64
#                               threads; and =0, every round handed over); and spinning on the
#                               pipeline's mutexes (fillrandom at 4 and 16 threads,
#                               --write_lock_spin_nanos=0)
#   BASE=path                   also A/B blocks of RIPTIDE against this baseline binary (engine
#                               riptide-base): fillrandom sync=0 at 16 and 64 threads (ab-base-fill),
#                               sync=1 at 64 (ab-base-sync1) and xbench zipf at 16 and 64
#                               (ab-base-xbench), REPS_AB=2 runs each, DURATION2 seconds, about 2.5
#                               minutes
#   SKIP="r-t16 r-t64"          blocks left out, by report name (the headings of summary.md), e.g.
#                               the read rows when only the write path changed
#   ARCHIVE=path.tgz            also tar the whole report folder (run logs included) into one file:
#                               the 16-core machine sends back only a bounded number of files
#   TSUNAMI=1                   also seed 000's tsunami for each engine: 500K rows, 64 threads,
#                               zipf 0.99, 1,000 tps then 300,000 tps then 1,000 (phases 5,15,5 s),
#                               at most 20 s of draining after the schedule (--tsunami_drain_limit),
#                               about 100 s more; tsunami-<engine>.{txt,csv,svg} in REPORT_DIR
#
# REPORT_DIR gets one compare.sh report per block (<block>.md, its stderr in <block>.err, its run
# logs in logs/<block>/), vmstat-<engine>-xbench64.txt with the bench output next to it, and
# summary.md: every report's ratio table and cores-busy table, and the vmstat averages (us sy id).
set -u

cd "$(dirname "$0")/.."

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi

RET=$(realpath -m -- "${1:-bench-data/many-core}")
RIPTIDE=${RIPTIDE:-target/peers/release/riptide}
REPS=${REPS:-3}
REPS2=${REPS2:-1}
DURATION2=${DURATION2:-4}
WORK=$(realpath -m -- "${WORK:-${TMPDIR:-/tmp}/many-core}")
DRY_RUN=${DRY_RUN:-0}
dry() { [[ "$DRY_RUN" != 0 ]]; }

BUILD_HINT="build it with: CARGO_TARGET_DIR=target/peers cargo build --release -p riptide-cli --features bench-rocksdb,bench-fjall
then strip it: mkdir -p target/device && strip -o target/device/riptide target/peers/release/riptide
and run with RIPTIDE=target/device/riptide"
if [[ ! -f "$RIPTIDE" || ! -x "$RIPTIDE" ]]; then
    if dry; then
        echo "many-core.sh: warning: RIPTIDE=$RIPTIDE is missing or not executable (dry run goes on); $BUILD_HINT" >&2
    else
        echo "many-core.sh: RIPTIDE=$RIPTIDE is missing or not executable; $BUILD_HINT" >&2
        exit 1
    fi
fi
# `vmstat -n 1` where procps is installed; elsewhere the same us/sy/id/wa columns from /proc/stat
# (the 16-core machine's image has no procps).
cpu_sampler() {
    if command -v vmstat >/dev/null; then
        exec vmstat -n 1
    fi
    echo "procs ---cpu--- (from /proc/stat; vmstat not installed)"
    echo " r us sy id wa"
    local prev=() cur=() d=() tot i
    read -r _ prev[0] prev[1] prev[2] prev[3] prev[4] prev[5] prev[6] prev[7] _ </proc/stat
    echo "0 0 0 0 0"  # vmstat's first line (since boot) is skipped by the averages; so is this one
    while sleep 1; do
        read -r _ cur[0] cur[1] cur[2] cur[3] cur[4] cur[5] cur[6] cur[7] _ </proc/stat
        tot=0
        for i in 0 1 2 3 4 5 6 7; do d[i]=$((cur[i] - prev[i])); tot=$((tot + d[i])); done
        ((tot > 0)) || tot=1
        # user+nice, system+irq+softirq+steal, idle, iowait (percent, as vmstat rounds)
        echo "0 $(((d[0] + d[1]) * 100 / tot)) $(((d[2] + d[5] + d[6] + d[7]) * 100 / tot)) $((d[3] * 100 / tot)) $((d[4] * 100 / tot))"
        prev=("${cur[@]}")
    done
}

SKIP=${SKIP:-}
skipped() { [[ " $SKIP " == *" $1 "* ]]; }

T0=$(date +%s)
EST_TOTAL=0
BLOCKS=()   # names, in run order
declare -A NOTE=() RC=()
if ! dry; then
    mkdir -p "$RET" "$WORK" || exit 1
fi

# Time estimate of one block, seconds: runs x (duration + ~1 s start/close/cleanup + prefill).
estimate() { # runs duration prefill_seconds
    echo $(($1 * ($2 + 1 + $3)))
}
count() { set -- $1; echo $#; }

# block NAME NOTE PREFILL_SECONDS VAR=value ...: one compare.sh run, report to $RET/NAME.md.
# Every setting is passed explicitly (defaults below, then the block's), so nothing leaks in
# from the caller's environment and the dry run shows the whole invocation.
KEYS=(BENCHMARKS THREADS SYNC ENGINES REPS NUM DURATION KEY_SIZE VALUE_SIZE CACHE_SIZE PREFILL EXTRA_FLAGS
    RIPTIDE_BASE)
block() {
    local name=$1 note=$2 pf=$3
    shift 3
    if skipped "$name"; then
        echo "== $name: skipped (SKIP)" >&2
        return
    fi
    declare -A v=([SYNC]=0 [ENGINES]="riptide rocksdb" [REPS]=$REPS [DURATION]=5 [KEY_SIZE]=16
        [VALUE_SIZE]=10 [CACHE_SIZE]=8388608 [PREFILL]=fillrandom,flush,waitforcompaction [EXTRA_FLAGS]=
        [RIPTIDE_BASE]=)
    local kv
    for kv in "$@"; do v[${kv%%=*}]=${kv#*=}; done
    local envs=() k
    for k in "${KEYS[@]}"; do envs+=("$k=${v[$k]}"); done
    envs+=("RIPTIDE=$RIPTIDE" "OUT=$WORK/$name")
    local runs=$(($(count "${v[THREADS]}") * $(count "${v[SYNC]}") * $(count "${v[ENGINES]}") * v[REPS]))
    local est
    est=$(estimate "$runs" "${v[DURATION]}" "$pf")
    EST_TOTAL=$((EST_TOTAL + est))
    BLOCKS+=("$name")
    NOTE[$name]="$note; REPS=${v[REPS]}, DURATION=${v[DURATION]}$( ((v[REPS] == 1)) && echo ' (1 run: no median)')"
    echo "== $name: ${NOTE[$name]}; $runs runs, estimate ${est}s" >&2
    if dry; then
        printf 'env'
        printf ' %q' "${envs[@]}"
        printf ' bash scripts/compare.sh > %q 2> %q\n' "$RET/$name.md" "$RET/$name.err"
        return
    fi
    local t=$(date +%s)
    rm -rf -- "$WORK/$name"
    env "${envs[@]}" bash scripts/compare.sh >"$RET/$name.md" 2>"$RET/$name.err"
    RC[$name]=$?
    mkdir -p "$RET/logs/$name"
    cp -r "$WORK/$name"/logs-*/. "$RET/logs/$name/" 2>/dev/null
    rm -rf -- "$WORK/$name"
    echo "   done in $(($(date +%s) - t))s (rc ${RC[$name]})" >&2
}

X=(NUM=500000 KEY_SIZE=12 VALUE_SIZE=500 CACHE_SIZE=268435456 PREFILL=fillseq,flush,waitforcompaction BENCHMARKS=xbench)
ZIPF="--mix=42:10:32:16 --zipf=0.99"
D2=(REPS="$REPS2" DURATION="$DURATION2")

# Headline rows (REPS, 5 s).
block w-sync0 "fillrandom sync=0, 4M keys" 0 BENCHMARKS=fillrandom THREADS="1 16 64" NUM=4000000
block w-sync1 "fillrandom sync=1, 4M keys" 0 BENCHMARKS=fillrandom THREADS=64 SYNC=1 NUM=4000000 \
    ENGINES="riptide riptide-async16 rocksdb"
block r-t16 "readrandom warm (1 GiB block cache), 2M keys" 7 BENCHMARKS=readrandom THREADS=16 NUM=2000000 \
    CACHE_SIZE=1073741824
block x-zipf-t64 "xbench 42:10:32:16 zipf 0.99, 500K rows" 3 "${X[@]}" THREADS=64 EXTRA_FLAGS="$ZIPF"
# Secondary rows (REPS2, DURATION2).
block w-sync0-t4 "fillrandom sync=0, 4M keys" 0 BENCHMARKS=fillrandom THREADS=4 NUM=4000000 "${D2[@]}"
block r-t64 "readrandom warm (1 GiB block cache), 2M keys" 7 BENCHMARKS=readrandom THREADS=64 NUM=2000000 \
    CACHE_SIZE=1073741824 "${D2[@]}"
block x-zipf "xbench 42:10:32:16 zipf 0.99, 500K rows" 3 "${X[@]}" THREADS="1 16 256" EXTRA_FLAGS="$ZIPF" "${D2[@]}"
block x-uniform "xbench 42:10:32:16 uniform, 500K rows" 3 "${X[@]}" THREADS=64 EXTRA_FLAGS="--mix=42:10:32:16" "${D2[@]}"

# Optional A/B blocks: engine riptide-base runs a wrapper that calls the same binary with one
# feature turned off, or, for an option off by default, on (the flag comes last, so it wins over
# nothing: compare.sh never passes it).
flag_wrapper() { # NAME FLAG: prints the path of a wrapper running $RIPTIDE with FLAG appended
    local w="$WORK/bin/riptide-$1"
    if ! dry; then
        mkdir -p "$WORK/bin"
        printf '#!/bin/sh\nexec %q "$@" %q\n' "$(realpath -- "$RIPTIDE")" "$2" >"$w"
        chmod +x "$w"
    fi
    echo "$w"
}
if [[ "${AB:-0}" != 0 ]]; then
    block ab-elr "xbench 42:10:32:16 zipf 0.99, 500K rows, 64 threads: riptide-base = --early_lock_release=false" 3 \
        "${X[@]}" THREADS=64 EXTRA_FLAGS="$ZIPF" ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper no-elr --early_lock_release=false)" "${D2[@]}"
    block ab-swizzle "readrandom warm (1 GiB block cache), 2M keys, 16 threads: riptide-base = --block_swizzling=false" 7 \
        BENCHMARKS=readrandom THREADS=16 NUM=2000000 CACHE_SIZE=1073741824 ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper no-swizzle --block_swizzling=false)" "${D2[@]}"
    block ab-helpers "fillrandom sync=0, 4M keys, 16 threads: riptide-base = --parallel_insert_helpers=0" 0 \
        BENCHMARKS=fillrandom THREADS=16 NUM=4000000 ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper no-helpers --parallel_insert_helpers=0)" "${D2[@]}"
    block ab-poll "xbench 42:10:32:16 zipf 0.99, 500K rows, 64 threads: riptide-base = --write_wait_spin_micros=0" 3 \
        "${X[@]}" THREADS=64 EXTRA_FLAGS="$ZIPF" ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper no-poll --write_wait_spin_micros=0)" "${D2[@]}"
    block ab-poll-fill "fillrandom sync=0, 4M keys, 64 threads: riptide-base = --write_wait_spin_micros=0" 0 \
        BENCHMARKS=fillrandom THREADS=64 NUM=4000000 ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper no-poll --write_wait_spin_micros=0)" "${D2[@]}"
    block ab-adaptive-fill "fillrandom sync=0, 4M keys, 64 threads: riptide-base = --write_wait_adaptive=true" 0 \
        BENCHMARKS=fillrandom THREADS=64 NUM=4000000 ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper adaptive --write_wait_adaptive=true)" "${D2[@]}"
    block ab-handoff-fill "fillrandom sync=0, 4M keys, 64 threads: riptide-base = --driver_commit_groups=4 (rounds over 4 groups handed over)" 0 \
        BENCHMARKS=fillrandom THREADS=64 NUM=4000000 ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper handoff-4 --driver_commit_groups=4)" "${D2[@]}"
    block ab-handoff-all-fill "fillrandom sync=0, 4M keys, 64 threads: riptide-base = --driver_commit_groups=0 (every round handed over)" 0 \
        BENCHMARKS=fillrandom THREADS=64 NUM=4000000 ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper handoff-all --driver_commit_groups=0)" "${D2[@]}"
    block ab-handoff-xbench "xbench 42:10:32:16 zipf 0.99, 500K rows, 16 and 64 threads: riptide-base = --driver_commit_groups=4" 3 \
        "${X[@]}" THREADS="16 64" EXTRA_FLAGS="$ZIPF" ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper handoff-4 --driver_commit_groups=4)" "${D2[@]}"
    block ab-lock-spin "fillrandom sync=0, 4M keys, 4 and 16 threads: riptide-base = --write_lock_spin_nanos=0" 0 \
        BENCHMARKS=fillrandom THREADS="4 16" NUM=4000000 ENGINES="riptide riptide-base" \
        RIPTIDE_BASE="$(flag_wrapper no-lock-spin --write_lock_spin_nanos=0)" "${D2[@]}"
fi
if [[ -n "${BASE:-}" ]]; then
    AB2=(REPS="${REPS_AB:-2}" DURATION="$DURATION2" ENGINES="riptide riptide-base" RIPTIDE_BASE="$(realpath -m -- "$BASE")")
    block ab-base-fill "fillrandom sync=0, 4M keys: riptide-base = the baseline binary $BASE" 0 \
        BENCHMARKS=fillrandom THREADS="16 64" NUM=4000000 "${AB2[@]}"
    block ab-base-sync1 "fillrandom sync=1, 4M keys, 64 threads: riptide-base = the baseline binary $BASE" 0 \
        BENCHMARKS=fillrandom THREADS=64 SYNC=1 NUM=4000000 "${AB2[@]}"
    block ab-base-xbench "xbench 42:10:32:16 zipf 0.99, 500K rows: riptide-base = the baseline binary $BASE" 3 \
        "${X[@]}" THREADS="16 64" EXTRA_FLAGS="$ZIPF" "${AB2[@]}"
fi

# CPU use (vmstat 1) during a 64-thread Zipfian xbench of each engine: prefill as compare.sh
# does (fillseq, flush, waitforcompaction, 1 thread), then vmstat only while the measured run lasts.
VM_ENGINES="riptide rocksdb"
XF=(--num=500000 --key_size=12 --value_size=500 --cache_size=268435456)
# prefill_and_run NAME ENGINE NOTE SAMPLE RUN_FLAGS...: a fresh 500K-row prefill of ENGINE (as
# compare.sh makes it: fillseq, flush, waitforcompaction, 1 thread), then one measured run with
# RUN_FLAGS; output in $RET/NAME-prefill.txt and $RET/NAME.txt; with SAMPLE (a file name),
# cpu_sampler writes into $RET/SAMPLE while the measured run lasts. Estimates 5 s of run
# unless EST_RUN says more.
prefill_and_run() {
    local name=$1 e=$2 note=$3 sample=$4
    shift 4
    if skipped "$name"; then
        echo "== $name: skipped (SKIP)" >&2
        return
    fi
    local db="$WORK/$name"
    local prefill=("$RIPTIDE" bench --engine="$e" --db="$db" --benchmarks=fillseq,flush,waitforcompaction
        --threads=1 --seed=1 --writes=500000 "${XF[@]}")
    local run=("$RIPTIDE" bench --engine="$e" --db="$db" --use_existing_db=1 "$@" "${XF[@]}")
    local est
    est=$(estimate 1 "${EST_RUN:-5}" 3)
    EST_TOTAL=$((EST_TOTAL + est))
    echo "== $name: $note; estimate ${est}s" >&2
    if dry; then
        printf '%q ' "${prefill[@]}"
        printf '> %q 2>&1\n' "$RET/$name-prefill.txt"
        [[ -z "$sample" ]] || printf 'cpu_sampler > %q &  # stopped when the run below ends\n' "$RET/$sample"
        printf '%q ' "${run[@]}"
        printf '> %q 2>&1\n' "$RET/$name.txt"
        return
    fi
    # The prefill's fresh start empties "$db" itself, refusing a database another process holds.
    "${prefill[@]}" >"$RET/$name-prefill.txt" 2>&1 || echo "   prefill failed, see $RET/$name-prefill.txt" >&2
    local vpid=
    if [[ -n "$sample" ]]; then
        cpu_sampler >"$RET/$sample" &
        vpid=$!
    fi
    "${run[@]}" >"$RET/$name.txt" 2>&1 || echo "   run failed, see $RET/$name.txt" >&2
    if [[ -n "$vpid" ]]; then
        kill "$vpid" 2>/dev/null
        wait "$vpid" 2>/dev/null
    fi
    rm -rf -- "$db"
}
PER=$((500000 / 64))
for e in $VM_ENGINES; do
    prefill_and_run "xbench64-$e" "$e" "vmstat 1 during xbench zipf 0.99 at 64 threads, 1 run" "vmstat-$e-xbench64.txt" \
        --benchmarks=xbench --mix=42:10:32:16 --zipf=0.99 --threads=64 --duration=5 --seed=1001 \
        --reads="$PER" --writes="$PER" --deletes="$PER"
done

# Seed 000's tsunami (optional): the same prefill, then the open-loop spike, per engine.
TS_ENGINES="riptide rocksdb"
if [[ "${TSUNAMI:-0}" != 0 ]]; then
    for e in $TS_ENGINES; do
        EST_RUN=45 prefill_and_run "tsunami-$e" "$e" \
            "tsunami 1,000 -> 300,000 tps at 64 threads, phases 5,15,5, drain limit 20 s" "" \
            --benchmarks=tsunami --mix=42:10:32:16 --zipf=0.99 --threads=64 --seed=2001 --tsunami_base_tps=1000 \
            --tsunami_factor=300 --tsunami_phases=5,15,5 --tsunami_drain_limit=20 --tsunami_out="$RET/tsunami-$e"
    done
fi

echo "many-core.sh: estimated total ${EST_TOTAL}s ($((EST_TOTAL / 60)) min $((EST_TOTAL % 60)) s)" >&2
if dry; then
    exit 0
fi

# Averages of vmstat's us, sy, id (and wa) columns over file $1, the first sample (averages since
# boot) left out.
vm_avg() {
    awk '!h && /(^| )us( |$)/ { for (i = 1; i <= NF; i++) c[$i] = i; h = 1; next }
        h && $1 ~ /^[0-9]+$/ { if (skip++ == 0) next; n++; us += $c["us"]; sy += $c["sy"]; id += $c["id"]; wa += $c["wa"] }
        END { if (n) printf "| %d | %.1f | %.1f | %.1f | %.1f |", n, us / n, sy / n, id / n, wa / n; else printf "| 0 | NA | NA | NA | NA |" }' "$1"
}
# The tables of a compare.sh report whose header names ops/s (medians, ratios) or cores (CPU use).
tables_of() {
    awk '/^\|/ { if (!inb) { keep = ($0 ~ /ops\/s \|/ || $0 ~ / cores \|/); if (printed && keep) print ""; inb = 1 }
        if (keep) { print; printed = 1 }; next } { inb = 0 }' "$1"
}

WALL=$(($(date +%s) - T0))
{
    echo "# Many-core check ($(date -Is))"
    echo
    echo "scripts/many-core.sh on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
    echo "riptide $(git rev-parse --short HEAD 2>/dev/null || echo ?), binary $RIPTIDE. Total wall time ${WALL}s (estimate ${EST_TOTAL}s)."
    echo "Ratios are riptide/peer (above 1: riptide is faster); cores = user + system CPU seconds over wall seconds of each run."
    for name in "${BLOCKS[@]}"; do
        echo
        echo "## $name: ${NOTE[$name]}"
        echo
        if [[ "${RC[$name]:-0}" != 0 ]]; then
            echo "**compare.sh failed (rc ${RC[$name]}); see $name.err and logs/$name/**"
            echo
        fi
        tables_of "$RET/$name.md"
    done
    echo
    echo "## vmstat 1 during xbench zipf 0.99, 64 threads, 5 s (1 run per engine; averages, first sample left out)"
    echo
    echo "| engine | samples | us | sy | id | wa |"
    echo "|---|---:|---:|---:|---:|---:|"
    for e in $VM_ENGINES; do
        echo "| $e $(vm_avg "$RET/vmstat-$e-xbench64.txt")"
    done
    echo
    echo "xbench result lines of those runs:"
    echo
    echo '```'
    for e in $VM_ENGINES; do
        echo "[$e] $(grep -m1 -E '^xbench +:' "$RET/xbench64-$e.txt" || echo 'no result line')"
    done
    echo '```'
    if [[ "${TSUNAMI:-0}" != 0 ]]; then
        echo
        echo "## tsunami: 1,000 -> 300,000 -> 1,000 tps (phases 5,15,5 s), 64 threads, zipf 0.99, 500K rows (1 run per engine)"
        echo
        echo '```'
        for e in $TS_ENGINES; do
            grep -E '^tsunami (phase|schedule|left)' "$RET/tsunami-$e.txt" 2>/dev/null | sed "s/^/[$e] /" ||
                echo "[$e] no tsunami lines"
        done
        echo '```'
    fi
} >"$RET/summary.md"
cat "$RET/summary.md"
echo "many-core.sh: reports in $RET (summary.md); total wall time ${WALL}s" >&2
if [[ -n "${ARCHIVE:-}" ]]; then
    tar czf "$ARCHIVE" -C "$(dirname "$RET")" "$(basename "$RET")" &&
        echo "many-core.sh: the report folder, logs included, archived in $ARCHIVE" >&2
fi
