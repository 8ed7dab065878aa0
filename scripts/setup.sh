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

# The server's tests drive `riptide serve` with stock clients: sysbench 1.0.20 and the
# MariaDB `mysql` client (Debian packages sysbench and mariadb-client).
missing_clients=()
command -v sysbench >/dev/null 2>&1 || missing_clients+=(sysbench)
command -v mysql >/dev/null 2>&1 || missing_clients+=(mariadb-client)
if [ ${#missing_clients[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_clients[@]}" >/dev/null
    else
        echo "setup: install ${missing_clients[*]} (Debian package names) for the server's tests" >&2
        exit 1
    fi
fi

# The object tier's tests (riptide-s3) start moto's S3 server (PyPI `moto[server]`) on
# loopback, from a virtual environment in target/venv. System site-packages are visible, so a
# machine that already has moto installs nothing.
venv="$(cd "$(dirname "$0")/.." && pwd)/target/venv"
if ! "$venv/bin/python" -c 'import moto.server, flask' >/dev/null 2>&1; then
    if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        else
            echo "setup: install python3-venv (Debian package) for the object tier's tests" >&2
            exit 1
        fi
    fi
    python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install -q 'moto[server]>=5.2,<6'
fi

# `scripts/setup.sh --peers`: also what the peer engines of `riptide bench` need
# (cargo features bench-rocksdb / bench-fjall): RocksDB compiles from C++ source and its
# bindings run bindgen, which needs libclang; Debian's db_bench is the historical anchor;
# and the SQL peers of `scripts/sql-compare.sh`: MariaDB with InnoDB and MyRocks (the anchor
# script starts its own mariadbd on loopback; the package's own service is not used).
if [ "${1:-}" = "--peers" ]; then
    missing=()
    command -v c++ >/dev/null 2>&1 || missing+=(g++)
    # libclang itself (libclang.so / libclang-N.so), not libclang-cpp, which other packages bring.
    [ -n "$(ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/*/libclang-[0-9]*.so* 2>/dev/null)" ] \
        || missing+=(libclang-dev)
    command -v db_bench >/dev/null 2>&1 || missing+=(rocksdb-tools)
    command -v mariadbd >/dev/null 2>&1 || missing+=(mariadb-server)
    [ -n "$(ls /usr/lib/mysql/plugin/ha_rocksdb.so 2>/dev/null)" ] || missing+=(mariadb-plugin-rocksdb)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
        else
            echo "setup: install ${missing[*]} (Debian package names)" >&2
            exit 1
        fi
    fi
fi
