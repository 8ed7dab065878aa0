#!/usr/bin/env python3
"""fdatasync latency of one small write, appending versus overwriting preallocated space.

    python3 scripts/fsync-probe.py [DIR] [N]

Writes N (default 2000) 100-byte records, each followed by fdatasync, into a file in DIR
(default: target/), twice per mode: appending (the file grows at every write, so each
fdatasync also journals the new length) and overwriting zeros that were written and fsynced
beforehand (what the redo log's zero-filled space gives a durable commit). Prints the median
and 99th percentile in microseconds. Cited by docs/bench/2026-11-27-redo-preallocate.md.
"""
import os
import sys
import time


def run(path, prealloc, n):
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR)
    try:
        if prealloc:
            os.write(fd, b"\0" * (n * 128 + 4096))
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, b"x" * 100)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    return lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "target"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "fsync-probe.tmp")
    for _ in range(2):
        for name, prealloc in (("appending", False), ("overwriting zeros", True)):
            p50, p99 = run(path, prealloc, n)
            print(f"{name:18} fdatasync p50 {p50:6.0f} us  p99 {p99:6.0f} us")


if __name__ == "__main__":
    main()
