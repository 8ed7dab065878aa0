#!/usr/bin/env bash
# The test command: every unit, integration and doc test of the workspace.
# README's set-up section and .ci/run both call exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace "$@"
# The whitebox crash test needs the crash points compiled in (riptide's `failpoints` feature).
cargo test -p riptide --features failpoints --test crash_points "$@"
# `riptide stress --crash_points` walks the same points from the tool (riptide-cli's `failpoints`).
cargo test -p riptide-cli --features failpoints --test stress_whitebox "$@"
