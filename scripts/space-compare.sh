#!/usr/bin/env bash
# Size on disk of the same data across engines and codecs: each configuration fills a fresh
# database with `riptide bench` (fillrandom), compacts it fully (everything in the bottom
# level), closes it, and the directory's allocated size (du) is taken once the process has
# exited. Prints a markdown report: bytes on disk per configuration, each against RocksDB with
# the same codecs, fill and compaction times, and the exact commands.
#
# Build the engines first (scripts/setup.sh --peers, then):
#   ROCKSDB_LIB_DIR=<prebuilt> ROCKSDB_STATIC=1 CARGO_TARGET_DIR=target/peers \
#     cargo build --release -p riptide-cli --features bench-rocksdb,bench-fjall
#
# Usage: scripts/space-compare.sh OUT   (settings from the environment, defaults below)
#   NUM=2000000                     keys (--num)
#   KEY_SIZE=16 VALUE_SIZE=100      --key_size, --value_size
#   COMPRESSION_RATIO=0.5           --compression_ratio (db_bench's values: each compressible to
#                                   about this share of its size)
#   CONFIGS="riptide:none:none riptide:lz4:lz4 riptide:lz4:zstd rocksdb:none:none rocksdb:lz4:lz4
#            rocksdb:lz4:zstd fjall:none:none fjall:lz4:lz4"
#                                   engine:codec:bottommost codec[:dictionary bytes] (riptide: L0
#                                   and L1, then L2; rocksdb: all levels but the bottommost, then
#                                   the bottommost; the optional fourth field is
#                                   --compression_max_dict_bytes, 0 when absent)
#   LEVEL=3                         --compression_level (zstd)
#   REPS=1                          runs per configuration (sizes are deterministic up to
#                                   compaction timing; the median is reported)
#   RIPTIDE=target/peers/release/riptide
set -euo pipefail

OUT=${1:?usage: scripts/space-compare.sh OUT}
NUM=${NUM:-2000000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-100}
COMPRESSION_RATIO=${COMPRESSION_RATIO:-0.5}
LEVEL=${LEVEL:-3}
REPS=${REPS:-1}
RIPTIDE=${RIPTIDE:-target/peers/release/riptide}
CONFIGS=${CONFIGS:-"riptide:none:none riptide:lz4:lz4 riptide:lz4:zstd rocksdb:none:none rocksdb:lz4:lz4 rocksdb:lz4:zstd fjall:none:none fjall:lz4:lz4"}

[[ -x "$RIPTIDE" ]] || { echo "no $RIPTIDE: build it first (see the header)" >&2; exit 1; }
mkdir -p "$OUT/logs"
report="$OUT/report.md"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A SIZE FILL COMPACT CMD
for rep in $(seq 1 "$REPS"); do
    for cfg in $CONFIGS; do
        IFS=: read -r engine codec bottom dict <<<"$cfg"
        dict=${dict:-0}
        db="$OUT/db-$engine-$codec-$bottom-$dict"
        rm -rf -- "$db"
        log="$OUT/logs/$engine-$codec-$bottom-$dict-$rep.log"
        args=(bench "--engine=$engine" --benchmarks=fillrandom,compact "--num=$NUM"
              "--key_size=$KEY_SIZE" "--value_size=$VALUE_SIZE" "--compression_ratio=$COMPRESSION_RATIO"
              "--compression_type=$codec" "--bottommost_compression_type=$bottom"
              "--compression_level=$LEVEL" "--compression_max_dict_bytes=$dict" "--db=$db" --seed=1)
        CMD[$cfg]="$RIPTIDE ${args[*]}"
        echo "[$rep/$REPS] $cfg" >&2
        "$RIPTIDE" "${args[@]}" >"$log" 2>&1
        size=$(du -sB1 -- "$db" | cut -f1)
        fill=$(awk '/^fillrandom +:.*seconds/ {for (i=1;i<=NF;i++) if ($(i+1)=="seconds") print $i}' "$log")
        compact=$(awk '/^compact +:.*seconds/ {for (i=1;i<=NF;i++) if ($(i+1)=="seconds") print $i}' "$log")
        SIZE[$cfg]+="$size "
        FILL[$cfg]+="$fill "
        COMPACT[$cfg]+="$compact "
        rm -rf -- "$db"
    done
done

{
    echo "# Size on disk: $NUM keys of $KEY_SIZE B, values of $VALUE_SIZE B (compression ratio $COMPRESSION_RATIO)"
    echo
    echo "$(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores;"
    echo "fillrandom then a full compaction, closed, then \`du -sB1\` of the directory (allocated bytes);"
    echo "median of $REPS run(s). zstd level $LEVEL. Raw data: $(( NUM * (KEY_SIZE + VALUE_SIZE) / 1000000 )) MB of keys and values."
    echo
    echo "| engine | codec (upper levels) | bottommost | dictionary bytes | MB on disk | against RocksDB, same codecs | fillrandom s | compact s |"
    echo "|---|---|---|---:|---:|---:|---:|---:|"
    for cfg in $CONFIGS; do
        IFS=: read -r engine codec bottom dict <<<"$cfg"
        s=$(tr ' ' '\n' <<<"${SIZE[$cfg]}" | grep . | median)
        f=$(tr ' ' '\n' <<<"${FILL[$cfg]}" | grep . | median)
        c=$(tr ' ' '\n' <<<"${COMPACT[$cfg]}" | grep . | median)
        peer="rocksdb:$codec:$bottom${dict:+:$dict}"
        ratio="—"
        if [[ $engine != rocksdb && -n "${SIZE[$peer]:-}" ]]; then
            p=$(tr ' ' '\n' <<<"${SIZE[$peer]}" | grep . | median)
            ratio=$(awk -v a="$s" -v b="$p" 'BEGIN {printf "%.2f", a / b}')
        fi
        printf '| %s | %s | %s | %s | %.1f | %s | %s | %s |\n' "$engine" "$codec" "$bottom" "${dict:-0}" \
            "$(awk -v a="$s" 'BEGIN {print a / 1e6}')" "$ratio" "$f" "$c"
    done
    echo
    echo "Commands (one per configuration; --db differs per run):"
    echo
    echo '```'
    for cfg in $CONFIGS; do echo "${CMD[$cfg]}"; done
    echo '```'
} >"$report"
cat "$report"
