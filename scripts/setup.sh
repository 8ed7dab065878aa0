#!/usr/bin/env bash
# Installs what a fresh machine needs to build, lint and test Riptide. Idempotent; quiet when
# everything is already there. Called by .ci/run; safe to run by hand.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found; install Rust with rustup (https://rustup.rs) first" >&2
    exit 1
fi
# rustfmt and clippy are rustup components; add them only when missing (no network otherwise).
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add rustfmt clippy
fi
# A C compiler is needed by crc32c's build script.
if ! command -v cc >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential
    else
        echo "setup: no C compiler (cc); install build-essential" >&2
        exit 1
    fi
fi
