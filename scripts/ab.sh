#!/usr/bin/env bash
# A change against a baseline build, A B A B through scripts/compare.sh (medians of REPS runs,
# CPU use beside throughput): fillrandom, readrandom and xbench 42:10:32:16, at THREADS.
# The renovation issue's "no performance change" check; any change can use it.
#
# Build both binaries in release mode first, e.g.:
#   git worktree add /tmp/base <base-commit>
#   (cd /tmp/base && CARGO_TARGET_DIR=$PWD/target/rel cargo build --release -p riptide-cli)
#   CARGO_TARGET_DIR=target/rel cargo build --release -p riptide-cli
#
# Usage: RIPTIDE=new/riptide RIPTIDE_BASE=base/riptide scripts/ab.sh [OUTDIR]
#   THREADS="1 32"  REPS=3  DURATION=5    (environment; defaults shown)
# Reports: OUTDIR/{fill,read,xbench}.md (default ./ab-out); about 7 minutes on 2 cores.
set -u
cd "$(dirname "$0")/.."
OUTD=${1:-ab-out}
mkdir -p "$OUTD"
export RIPTIDE=${RIPTIDE:-target/rel/release/riptide} RIPTIDE_BASE=${RIPTIDE_BASE:-target/base/release/riptide}
export REPS=${REPS:-3} DURATION=${DURATION:-5} THREADS=${THREADS:-1 32} ENGINES="riptide riptide-base"
B=${TMPDIR:-/tmp}/riptide-ab
mkdir -p "$B"
run() {
    local name=$1
    shift
    env OUT="$B/$name" "$@" bash scripts/compare.sh >"$OUTD/$name.md" 2>"$OUTD/$name.err"
    sed -n '/^| workload/,/^$/p' "$OUTD/$name.md" | head -8
}
run fill BENCHMARKS=fillrandom NUM=2000000
run read BENCHMARKS=readrandom NUM=1000000 CACHE_SIZE=268435456
run xbench BENCHMARKS=xbench NUM=500000 KEY_SIZE=12 VALUE_SIZE=500 CACHE_SIZE=268435456 \
    PREFILL=fillseq,flush,waitforcompaction EXTRA_FLAGS="--mix=42:10:32:16"
