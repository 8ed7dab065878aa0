#!/usr/bin/env bash
# L2 on local disk against L2 on an S3-compatible object store, side by side in one run: for
# each mode, alternating (local, object, local, object, ...), `riptide bench` fills a fresh
# database and compacts it fully (every row in L2), then a second process reads it back:
# readrandom with the extent cache as the fill left it (warm: uploads are cached), seekrandom,
# and readrandom with no extent cache at all (cold: every block a ranged GET). The object
# store is moto's S3 server (started here, on loopback) behind a proxy adding LATENCY_MS to
# every request, so the object tier pays a realistic round trip. Prints a markdown report of
# medians with the exact commands.
#
# Build first: cargo build --release -p riptide-cli; and scripts/setup.sh (moto's venv).
#
# Usage: scripts/tier-compare.sh OUT   (settings from the environment, defaults below)
#   NUM=1000000 KEY_SIZE=16 VALUE_SIZE=100 COMPRESSION_RATIO=0.5
#   READS=200000        reads per warm benchmark (--reads)
#   COLD_READS=500      reads of the cold benchmark
#   CACHE=8388608       block cache bytes (--cache_size): small, so reads reach the extents
#   LATENCY_MS=20       added to every object-store request
#   REPS=3              runs per mode (medians reported)
#   RIPTIDE=target/release/riptide
set -euo pipefail

OUT=${1:?usage: scripts/tier-compare.sh OUT}
NUM=${NUM:-1000000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-100}
COMPRESSION_RATIO=${COMPRESSION_RATIO:-0.5}
READS=${READS:-200000}
COLD_READS=${COLD_READS:-500}
CACHE=${CACHE:-8388608}
LATENCY_MS=${LATENCY_MS:-20}
REPS=${REPS:-3}
RIPTIDE=${RIPTIDE:-target/release/riptide}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$ROOT/target/venv/bin/python"

[[ -x "$RIPTIDE" ]] || { echo "no $RIPTIDE: cargo build --release -p riptide-cli" >&2; exit 1; }
[[ -x "$PY" ]] || { echo "no $PY: run scripts/setup.sh" >&2; exit 1; }
mkdir -p "$OUT/logs"
report="$OUT/report.md"

# shellcheck source=lib/moto.sh
source "$ROOT/scripts/lib/moto.sh"
start_moto "$OUT/logs"
port=$MOTO_PORT
trap 'kill $MOTO_PID 2>/dev/null || true' EXIT
# ops/s of benchmark $2 (its Nth run, $3, default 1) in log $1
rate() { awk -v b="$2" -v n="${3:-1}" '$1==b && $2==":" {c++; if (c==n) for (i=1;i<=NF;i++) if ($(i+1)=="ops/sec") print $i}' "$1"; }
secs() { awk -v b="$2" '$1==b && $2==":" {for (i=1;i<=NF;i++) if ($(i+1)=="seconds") print $i}' "$1"; }

common=("--num=$NUM" "--key_size=$KEY_SIZE" "--value_size=$VALUE_SIZE" "--compression_ratio=$COMPRESSION_RATIO"
        --compression_type=lz4 --bottommost_compression_type=zstd "--cache_size=$CACHE" --seed=1)
declare -A FILL COMPACT WARM SEEK COLD CMDS
for rep in $(seq 1 "$REPS"); do
    for mode in local object; do
        db="$OUT/db-$mode"
        rm -rf -- "$db"
        obj=()
        if [[ $mode == object ]]; then
            obj=("--object_store=s3://riptide/run-$rep" "--object_endpoint=http://127.0.0.1:$port"
                 "--object_latency_ms=$LATENCY_MS")
        fi
        fill=(bench --benchmarks=fillrandom,compact "--db=$db" "${common[@]}" "${obj[@]}")
        read=(bench --use_existing_db=1 --benchmarks=readrandom,seekrandom "--reads=$READS" "--db=$db"
              "${common[@]}" "${obj[@]}")
        cold=(bench --use_existing_db=1 --benchmarks=readrandom "--reads=$COLD_READS" "--db=$db"
              "${common[@]}" "${obj[@]}" --extent_cache_size=0)
        echo "[$rep/$REPS] $mode" >&2
        "$RIPTIDE" "${fill[@]}" >"$OUT/logs/$mode-fill-$rep.log" 2>&1
        "$RIPTIDE" "${read[@]}" >"$OUT/logs/$mode-read-$rep.log" 2>&1
        "$RIPTIDE" "${cold[@]}" >"$OUT/logs/$mode-cold-$rep.log" 2>&1
        FILL[$mode]+="$(rate "$OUT/logs/$mode-fill-$rep.log" fillrandom) "
        COMPACT[$mode]+="$(secs "$OUT/logs/$mode-fill-$rep.log" compact) "
        WARM[$mode]+="$(rate "$OUT/logs/$mode-read-$rep.log" readrandom) "
        SEEK[$mode]+="$(rate "$OUT/logs/$mode-read-$rep.log" seekrandom) "
        COLD[$mode]+="$(rate "$OUT/logs/$mode-cold-$rep.log" readrandom) "
        CMDS[$mode]="$RIPTIDE ${fill[*]}
$RIPTIDE ${read[*]}
$RIPTIDE ${cold[*]}"
    done
done

m() { tr ' ' '\n' <<<"$1" | grep -v '^$' | median; }
{
    echo "# L2 local vs L2 on an object store ($(date -u +%F), commit $(git -C "$ROOT" rev-parse --short HEAD))"
    echo
    echo "$NUM keys of $KEY_SIZE B / $VALUE_SIZE B (compression ratio $COMPRESSION_RATIO), default codecs (LZ4, LZ4, zstd), block cache $CACHE B;"
    echo "object store: moto on loopback behind a proxy adding $LATENCY_MS ms per request. Medians of $REPS runs, alternating."
    echo
    echo "| | fillrandom ops/s | compact s | readrandom warm ops/s | seekrandom ops/s | readrandom cold ops/s |"
    echo "|---|---:|---:|---:|---:|---:|"
    for mode in local object; do
        echo "| L2 $mode | $(m "${FILL[$mode]}") | $(m "${COMPACT[$mode]}") | $(m "${WARM[$mode]}") | $(m "${SEEK[$mode]}") | $(m "${COLD[$mode]}") |"
    done
    echo
    echo "Runs: fill ${FILL[local]}/ ${FILL[object]}; warm ${WARM[local]}/ ${WARM[object]}; cold ${COLD[local]}/ ${COLD[object]}"
    echo
    for mode in local object; do
        echo "Commands, L2 $mode:"
        echo '```'
        echo "${CMDS[$mode]}"
        echo '```'
    done
} >"$report"
cat "$report"
