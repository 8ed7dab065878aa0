#!/usr/bin/env bash
# Fuzzes Riptide's on-disk parsers: every cargo-fuzz target in fuzz/ (block decoder, extent
# footer/index/filter/properties and whole extent images, redo segments, slog, checkpoint,
# CURRENT/CATALOG/data-file headers; see riptide/src/fuzzing.rs), and riptide-server's protocol
# decoders (server_packets) and SQL layer (sql_query), for a time bound each.
#
# Usage: scripts/fuzz.sh                 every target, FUZZ_SECONDS each
#   FUZZ_SECONDS=30                      seconds per target
#   TARGETS="extent redo"                a subset
#   FUZZ_CHUNK=60                        runs each target in chunks of at most this many seconds,
#                                        waiting between chunks while QUIET_FILE exists
#   QUIET_FILE=/tmp/riptide-quiet        (someone is benchmarking: pause)
#   FUZZ_ARGS=""                         more libFuzzer flags
#
# Needs the nightly toolchain (`rustup toolchain install nightly`); installs cargo-fuzz 0.13.2
# if missing. Seeds each corpus (fuzz/corpus/<target>) with valid images written by the engine
# itself and adds fuzz/regressions/<target> (inputs that once crashed a target) as seeds.
# Prints executions per target; exits non-zero if any target crashed (the crashing input is
# in fuzz/artifacts/<target>/; keep it in fuzz/regressions/<target>/ once fixed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_CHUNK=${FUZZ_CHUNK:-60}
QUIET_FILE=${QUIET_FILE:-/tmp/riptide-quiet}
TARGETS=${TARGETS:-"data_block extent redo slog checkpoint small_files server_packets sql_query"}
FUZZ_ARGS=${FUZZ_ARGS:-}

quiet_wait() {
    while [ -e "$QUIET_FILE" ]; do sleep 20; done
}

if ! cargo fuzz --version 2>/dev/null | grep -q '0\.13\.2'; then
    echo "installing cargo-fuzz 0.13.2"
    cargo install --locked cargo-fuzz@0.13.2
fi

quiet_wait
echo "seeding fuzz/corpus"
cargo run -q -p riptide --features fuzzing --example fuzz_seeds -- "$root/fuzz/corpus"

cd fuzz
quiet_wait
cargo +nightly fuzz build

logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT
failed=0
summary=()
for t in $TARGETS; do
    mkdir -p "corpus/$t"
    seeds=("corpus/$t")
    if [ -d "regressions/$t" ]; then seeds+=("regressions/$t"); fi
    left=$FUZZ_SECONDS
    execs=0
    status=ok
    while [ "$left" -gt 0 ]; do
        chunk=$((left < FUZZ_CHUNK ? left : FUZZ_CHUNK))
        quiet_wait
        log="$logdir/$t.log"
        # shellcheck disable=SC2086
        if cargo +nightly fuzz run "$t" "${seeds[@]}" -- \
            -max_total_time="$chunk" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 $FUZZ_ARGS \
            >"$log" 2>&1; then
            :
        else
            status=CRASH
        fi
        n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        execs=$((execs + ${n:-0}))
        if [ "$status" != ok ]; then
            echo "== $t crashed; the end of its log:"
            tail -40 "$log"
            failed=1
            break
        fi
        left=$((left - chunk))
    done
    corpus_size=$(find "corpus/$t" -type f | wc -l)
    line=$(printf '%-12s %-6s %12s execs in %4ss, corpus %5s inputs' "$t" "$status" "$execs" "$FUZZ_SECONDS" "$corpus_size")
    echo "$line"
    summary+=("$line")
done

echo
echo "fuzz summary (FUZZ_SECONDS=$FUZZ_SECONDS):"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
    echo "FAILED: a target crashed (inputs in fuzz/artifacts/)"
    exit 1
fi
