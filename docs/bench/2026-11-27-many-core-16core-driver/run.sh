#!/usr/bin/env bash
# One-off 16-core check after the driver change (2026-11-27): xbench zipf at 16/64 threads and
# fillrandom sync=0 at 4/16 threads against RocksDB, with the previous binary (riptide-base) or
# --write_queues=1 (wrapper) as the third engine; fillrandom sync=1 at 64 threads.
set -u
cd "$(dirname "$0")/../.."
P=target/devpack
gunzip -c $P/riptide.gz > /tmp/riptide; gunzip -c $P/riptide-base.gz > /tmp/riptide-base
chmod +x /tmp/riptide /tmp/riptide-base
R=/tmp/riptide; B=/tmp/riptide-base
O=/tmp/rep2; mkdir -p $O/bin
wrap() { printf '#!/bin/sh\nexec %q "$@" %q\n' "$R" "$2" > $O/bin/$1; chmod +x $O/bin/$1; echo $O/bin/$1; }
Q1=$(wrap q1 --write_queues=1)
blk() {
    local name=$1; shift; local t=$(date +%s)
    env "$@" RIPTIDE=$R OUT=/tmp/w/$name bash scripts/compare.sh > $O/$name.md 2> $O/$name.err
    echo "$name rc=$? $(( $(date +%s) - t ))s"
    mkdir -p $O/logs/$name; cp -r /tmp/w/$name/logs-*/. $O/logs/$name/ 2>/dev/null; rm -rf /tmp/w/$name
    sed -n '/^| workload/,/^$/p' $O/$name.md | head -12
}
X=(NUM=500000 KEY_SIZE=12 VALUE_SIZE=500 CACHE_SIZE=268435456 PREFILL=fillseq,flush,waitforcompaction BENCHMARKS=xbench "EXTRA_FLAGS=--mix=42:10:32:16 --zipf=0.99")
blk x16-new-old "${X[@]}" THREADS=16 REPS=2 DURATION=4 ENGINES="riptide riptide-base rocksdb" RIPTIDE_BASE=$B
blk w-q1 BENCHMARKS=fillrandom NUM=4000000 THREADS="4 16" REPS=2 DURATION=4 ENGINES="riptide riptide-base rocksdb" RIPTIDE_BASE=$Q1
blk x64-q1 "${X[@]}" THREADS=64 REPS=1 DURATION=4 ENGINES="riptide riptide-base rocksdb" RIPTIDE_BASE=$Q1
blk s1-64 BENCHMARKS=fillrandom NUM=4000000 THREADS=64 SYNC=1 REPS=1 DURATION=4 ENGINES="riptide rocksdb"
