#!/usr/bin/env bash
# Size on disk of the sysbench tables: `riptide serve` against MariaDB InnoDB and MyRocks, each
# with its defaults (Riptide: L0 and L1 uncompressed, L2 zstd), after the same
# `sysbench oltp_read_write prepare` of TABLES x TABLE_SIZE rows (issue 23; seed 004 §3.3 reports
# X-Engine's sysbench tables at 40 % of InnoDB's).
#
#   scripts/sql-size.sh OUTDIR
#
# Riptide: prepare, clean shutdown (memtables flushed), sizes; then `riptide compact` (every
# table in L2, zstd) and sizes again; then, for each of CODECS, a copy of the closed database
# compacted with those codecs (`riptide compact --compression-per-level`, a `+N` suffix adds
# `--zstd-dictionary-bytes N`). MariaDB: through ../shared/anchors/sysbench_mariadb.sh
# with no tests (TESTS=" ": an empty value means its default matrix), so it prepares, idles
# SETTLE seconds and shuts down cleanly (KEEP_DATA=1); then InnoDB's
# sbtest/*.ibd and MyRocks' #rocksdb/ (SST files, and its WAL apart). Sizes are allocated bytes
# (`du -sB1`) after each server exited. OUTDIR gets the logs and summary.md.
#
# Needs: sysbench, mariadb-server and mariadb-plugin-rocksdb (Debian), a release riptide
# binary (RIPTIDE, default target/release/riptide). Builds nothing.
# Environment: TABLES (4) TABLE_SIZE (250000) SETTLE (10) PORT RIPTIDE_PORT BASE
#   CODECS ("none,none,none lz4,lz4,lz4 lz4,lz4,zstd:3 lz4,lz4,zstd:3+16384"; empty: none)
#   PEERS (1; 0 skips MariaDB: then no ratio column)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/serve.sh
OUT=${1:?usage: scripts/sql-size.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TABLES=${TABLES:-4}
TABLE_SIZE=${TABLE_SIZE:-250000}
SETTLE=${SETTLE:-10}
PORT=${PORT:-3310}
RIPTIDE_PORT=${RIPTIDE_PORT:-3320}
RIPTIDE=${RIPTIDE:-target/release/riptide}
ANCHOR=${ANCHOR:-../shared/anchors/sysbench_mariadb.sh}
BASE=${BASE:-/tmp/sql-size}
CODECS=${CODECS-"none,none,none lz4,lz4,lz4 lz4,lz4,zstd:3 lz4,lz4,zstd:3+16384"}
PEERS=${PEERS:-1}
rm -rf "$BASE"
mkdir -p "$BASE"

log() { echo "[$(date '+%F %T')] $*" | tee -a "$OUT/run.log"; }
bytes() { du -sB1 "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
mb() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1e6}'; }

# Riptide.
dir="$BASE/riptide"
start_riptide_serve "$dir" "$RIPTIDE_PORT"
pid=$SERVE_PID
mapfile -t sb < <(sysbench_riptide_flags "$RIPTIDE_PORT")
log "riptide: prepare $TABLES x $TABLE_SIZE"
t0=$(date +%s)
sysbench oltp_read_write "${sb[@]}" --threads="$TABLES" prepare > "$OUT/riptide-prepare.out" 2>&1
log "riptide: prepare took $(($(date +%s) - t0)) s"
kill -TERM "$pid"
wait "$pid" || true
R_CLOSED=$(bytes "$dir/data")
cp -a "$dir/data" "$BASE/riptide-closed"
"$RIPTIDE" inspect levels --db "$dir/data" > "$OUT/riptide-levels-closed.txt" 2>&1 || true
t0=$(date +%s)
"$RIPTIDE" compact --db "$dir/data" | tee -a "$OUT/run.log"
log "riptide: compact took $(($(date +%s) - t0)) s"
R_COMPACT=$(bytes "$dir/data")
"$RIPTIDE" inspect levels --db "$dir/data" > "$OUT/riptide-levels-compacted.txt" 2>&1 || true

# The same closed database compacted with each of CODECS.
declare -A R_CODEC
for c in $CODECS; do
    codecs=${c%%+*}
    dict=0
    [[ $c == *+* ]] && dict=${c##*+}
    copy="$BASE/riptide-$codecs-$dict"
    rm -rf "$copy"
    cp -a "$BASE/riptide-closed" "$copy"
    "$RIPTIDE" compact --db "$copy" --compression-per-level "$codecs" --zstd-dictionary-bytes "$dict" \
        > "$OUT/riptide-compact-$codecs-$dict.txt" 2>&1
    R_CODEC[$c]=$(bytes "$copy")
    log "riptide: compacted with $codecs, dictionary $dict bytes: $(mb "${R_CODEC[$c]}") MB"
    rm -rf "$copy"
done

# MariaDB InnoDB and MyRocks.
I_IBD=0 M_SST=0 M_WAL=0
if [[ $PEERS == 1 ]]; then
    log "mariadb: prepare through $ANCHOR"
    ENGINES="innodb rocksdb" TESTS=" " WARMUP=0 SKEW_TEST=none SETTLE="$SETTLE" KEEP_DATA=1 TABLES="$TABLES" \
        TABLE_SIZE="$TABLE_SIZE" PORT="$PORT" BASE="$BASE/mariadb" RAW_LOG="$OUT/mariadb.log" \
        bash "$ANCHOR" > /dev/null 2>&1 || log "anchor exited with $?"
    I_IBD=$(bytes "$BASE"/mariadb/bench-innodb/data/sbtest/*.ibd)
    M_SST=$(bytes "$BASE"/mariadb/bench-rocksdb/data/\#rocksdb/*.sst)
    M_WAL=$(bytes "$BASE"/mariadb/bench-rocksdb/data/\#rocksdb/*.log)
    ls -la "$BASE"/mariadb/bench-rocksdb/data/\#rocksdb/ > "$OUT/myrocks-files.txt" 2>&1 || true
fi

{
    echo "# sysbench tables on disk: riptide serve vs MariaDB InnoDB and MyRocks ($(date -I))"
    echo
    echo "\`scripts/sql-size.sh\`: \`sysbench oltp_read_write prepare\`, $TABLES tables x $TABLE_SIZE rows"
    echo "(id, k with a secondary index, c CHAR(120), pad CHAR(60)), each engine with its defaults;"
    echo "allocated bytes (\`du -sB1\`) once the server exited. riptide $(git rev-parse --short HEAD 2>/dev/null || echo ?)."
    echo
    echo "| engine | what is counted | MB | ÷ InnoDB |"
    echo "|---|---|---:|---:|"
    rows=("Riptide, after a clean shutdown|data directory|$R_CLOSED"
          "Riptide, after \`riptide compact\` (all in L2, default codecs: zstd)|data directory|$R_COMPACT")
    for c in $CODECS; do
        flags="--compression-per-level ${c%%+*}"
        if [[ $c == *+* ]]; then flags+=" --zstd-dictionary-bytes ${c##*+}"; fi
        rows+=("Riptide, \`riptide compact $flags\`|data directory|${R_CODEC[$c]}")
    done
    if [[ $PEERS == 1 ]]; then
        rows+=("InnoDB|sbtest/*.ibd|$I_IBD" "MyRocks|#rocksdb/*.sst (WAL apart: $(mb "$M_WAL") MB)|$M_SST")
    fi
    for row in "${rows[@]}"; do
        IFS='|' read -r name what b <<<"$row"
        echo "| $name | $what | $(mb "$b") | $(awk -v a="$b" -v i="$I_IBD" 'BEGIN {if (i > 0) printf "%.2f", a / i; else print "NA"}') |"
    done
} > "$OUT/summary.md"
cat "$OUT/summary.md"
rm -rf "$BASE"
