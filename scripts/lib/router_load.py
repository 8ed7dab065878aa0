#!/usr/bin/env python3
"""Loads sysbench's tables through `riptide router`, as `sysbench ... prepare` would make
them (the same columns, index and value shapes), but with each multi-row INSERT holding only
rows of one partition: the router refuses a write that spans partitions, and sysbench's own
prepare batches consecutive ids together.

    router_load.py HOST PORT TABLES TABLE_SIZE PARTITIONS [SEED]

Placement is the router's (riptide-server/src/router/placement.rs, version 1): FNV-1a 64 over
b"i" + the key as 16 big-endian bytes of an i128, modulo the partition count.
"""
import random
import subprocess
import sys


def partition_of(key: int, partitions: int) -> int:
    h = 0xCBF29CE484222325
    for b in b"i" + key.to_bytes(16, "big", signed=True):
        h ^= b
        h = (h * 0x100000001B3) % (1 << 64)
    return h % partitions


def digits(rng: random.Random, groups: int) -> str:
    # sysbench's c and pad: groups of 11 digits joined by '-'.
    return "-".join("".join(rng.choice("0123456789") for _ in range(11)) for _ in range(groups))


def statements(tables: int, size: int, partitions: int, seed: int):
    rng = random.Random(seed)
    for t in range(1, tables + 1):
        yield (
            f"CREATE TABLE sbtest{t} (id INTEGER NOT NULL AUTO_INCREMENT, "
            "k INTEGER DEFAULT '0' NOT NULL, c CHAR(120) DEFAULT '' NOT NULL, "
            "pad CHAR(60) DEFAULT '' NOT NULL, PRIMARY KEY (id))"
        )
        batches = [[] for _ in range(partitions)]
        for i in range(1, size + 1):
            p = partition_of(i, partitions)
            batches[p].append(f"({i},{rng.randint(1, size)},'{digits(rng, 10)}','{digits(rng, 5)}')")
            if len(batches[p]) == 500:
                yield f"INSERT INTO sbtest{t} (id, k, c, pad) VALUES " + ",".join(batches[p])
                batches[p] = []
        for rows in batches:
            if rows:
                yield f"INSERT INTO sbtest{t} (id, k, c, pad) VALUES " + ",".join(rows)
        yield f"CREATE INDEX k_{t} ON sbtest{t}(k)"


def main() -> int:
    host, port, tables, size, partitions = sys.argv[1:6]
    seed = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    sql = ";\n".join(statements(int(tables), int(size), int(partitions), seed)) + ";\n"
    done = subprocess.run(
        ["mysql", "-h", host, "-P", port, "-u", "root", "--batch", "sbtest"],
        input=sql.encode(),
        capture_output=True,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr.decode(errors="replace"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
