#!/usr/bin/env bash
# Read benchmarks on one prefilled database per engine: each engine's database is filled once
# (fillrandom, flush, waitforcompaction), then every read scenario runs on it with
# --use_existing_db=1, the engines alternating inside each repetition (A B A B ...). Prints a
# markdown table of median ops/sec and riptide/peer ratios, and every command line.
# (scripts/compare.sh refills before every measured run; for large read matrices that costs
# more than the reads.)
#
# Build first: CARGO_TARGET_DIR=target/peers cargo build --release -p riptide-cli --features bench-rocksdb,bench-fjall
#
# Usage: scripts/read-matrix.sh   (settings from the environment)
#   ENGINES="riptide rocksdb db_bench78"   engines (db_bench78 = Debian's db_bench 7.8.3)
#   NUM=10000000 KEY_SIZE=16 VALUE_SIZE=10 REPS=3 READS=2000000 SEED=1
#   SCENARIOS="name:flags;name:flags"  read scenarios; each runs $BENCH twice in one process
#                                      (the first warms the caches, the second is scored)
#   OUT=bench-data/read-matrix          databases and logs
#   REUSE=1                             keep databases a previous run filled (same NUM, sizes, SEED)
#   BENCH=readrandom                    the read benchmark (readrandom or seekrandom)
#   PREFILL=fillrandom,flush,waitforcompaction   how each database is filled (e.g. add ",compact"
#                                       for a fully compacted database on every engine)
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINES=${ENGINES:-"riptide rocksdb db_bench78"}
NUM=${NUM:-10000000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-10}
REPS=${REPS:-3}
READS=${READS:-2000000}
SEED=${SEED:-1}
RIPTIDE=${RIPTIDE:-target/peers/release/riptide}
DB_BENCH=${DB_BENCH:-db_bench}
OUT=${OUT:-bench-data/read-matrix}
SCENARIOS=${SCENARIOS:-"warm:--cache_size=1073741824;cold:--cache_size=8388608;skew-rowcache-off:--cache_size=8388608 --read_random_exp_range=10 --row_cache_size=0;skew-rowcache-on:--cache_size=8388608 --read_random_exp_range=10 --row_cache_size=134217728"}

LOGS="$OUT/logs-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$LOGS"
CMDS="$LOGS/commands.txt"
: >"$CMDS"

common() {
    echo --num="$NUM" --key_size="$KEY_SIZE" --value_size="$VALUE_SIZE" --block_size=16384 \
        --bloom_bits=10 --compression_type=none --write_buffer_size=67108864
}

# run ENGINE DB LOG FLAGS...
run() {
    local engine=$1 db=$2 log=$3
    shift 3
    local cmd
    if [[ $engine == db_bench78 ]]; then
        cmd=("$DB_BENCH" --db="$db" $(common) "$@")
    else
        cmd=("$RIPTIDE" bench --engine="$engine" --db="$db" $(common) "$@")
    fi
    echo "${cmd[*]}" >>"$CMDS"
    "${cmd[@]}" >"$log" 2>&1
}

BENCH=${BENCH:-readrandom}
ops_of() { awk -v b="$BENCH" '$1 == b && $2 == ":" { v = $5 } END { print v }' "$1"; }

for e in $ENGINES; do
    if [[ ${REUSE:-0} == 1 && -d $OUT/db-$e ]]; then
        echo "reusing $OUT/db-$e" >&2
        continue
    fi
    rm -rf "$OUT/db-$e"
    echo "prefill $e ..." >&2
    run "$e" "$OUT/db-$e" "$LOGS/prefill-$e.log" --benchmarks="${PREFILL:-fillrandom,flush,waitforcompaction}" \
        --seed="$SEED" --cache_size=8388608
done

declare -A RESULTS
IFS=';' read -ra LIST <<<"$SCENARIOS"
for rep in $(seq 1 "$REPS"); do
    for s in "${LIST[@]}"; do
        name=${s%%:*}
        flags=${s#*:}
        for e in $ENGINES; do
            log="$LOGS/$name-$e-r$rep.log"
            # shellcheck disable=SC2086
            run "$e" "$OUT/db-$e" "$log" --use_existing_db=1 --benchmarks="$BENCH,$BENCH" \
                --reads="$READS" --seed=$((SEED + rep)) $flags
            RESULTS["$name|$e"]+="$(ops_of "$log") "
            echo "$name $e rep $rep: $(ops_of "$log") ops/sec" >&2
        done
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "| scenario | $(echo $ENGINES | sed 's/ / | /g') | ratios riptide/peer |"
echo "|---|$(for _ in $ENGINES; do printf -- '---|'; done)---|"
for s in "${LIST[@]}"; do
    name=${s%%:*}
    row="| $name (\`${s#*:}\`) |"
    declare -A MED=()
    for e in $ENGINES; do
        m=$(echo "${RESULTS["$name|$e"]:-}" | median)
        MED[$e]=$m
        row+=" ${m:-—} |"
    done
    ratios=""
    for e in $ENGINES; do
        [[ $e == riptide || -z ${MED[$e]} || -z ${MED[riptide]:-} ]] && continue
        ratios+="$(awk -v a="${MED[riptide]}" -v b="${MED[$e]}" 'BEGIN { printf "%.2fx vs %s; ", a / b, "'"$e"'" }')"
    done
    echo "$row ${ratios%; } |"
done
echo
echo "Runs (ops/sec per repetition):"
for k in "${!RESULTS[@]}"; do echo "- $k: ${RESULTS[$k]}"; done | sort
echo
echo "Commands ($CMDS):"
sed 's/^/    /' "$CMDS"
