/* Copy probe for docs/PERFORMANCE.md (Fig. 16, 2026-11-24): how fast can 200 MB of 16 KiB
 * blocks that sit in the page cache be copied into new 2 MiB extents of the same file?
 *   pread+pwrite : each block read into a 2 MiB buffer, one pwrite per extent (Riptide's copy)
 *   cfr-block    : copy_file_range once per 16 KiB block (in-kernel copy)
 *   cfr-run20    : copy_file_range once per run of 20 blocks
 * Times exclude the final fdatasync (the page-cache work is what is measured).
 * Build and run: cc -O2 -o /tmp/copy-probe docs/bench/2026-11-24-copy-probe.c && /tmp/copy-probe /tmp/copy-probe.data
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#define SRC (200L << 20)
#define EXT (2L << 20)
#define BLK 16384L
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "/tmp/copy-probe.data";
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) { perror(path); return 1; }
  char *buf = malloc(EXT);
  for (long i = 0; i < EXT; i++) buf[i] = rand();
  for (long o = 0; o < SRC; o += EXT) pwrite(fd, buf, EXT, o);
  fsync(fd);
  for (long o = 0; o < SRC; o += EXT) pread(fd, buf, EXT, o); /* source in the page cache */
  for (int rep = 0; rep < 3; rep++) {
    for (int m = 0; m < 3; m++) {
      ftruncate(fd, SRC);
      fdatasync(fd);
      double t = now();
      for (long e = 0; e < SRC; e += EXT) {
        if (m == 0) {
          for (long b = 0; b < EXT; b += BLK) pread(fd, buf + b, BLK, e + b);
          pwrite(fd, buf, EXT, SRC + e);
        } else if (m == 1) {
          for (long b = 0; b < EXT; b += BLK) {
            loff_t i = e + b, o = SRC + e + b;
            copy_file_range(fd, &i, fd, &o, BLK, 0);
          }
        } else {
          for (long b = 0; b < EXT; b += 20 * BLK) {
            loff_t i = e + b, o = SRC + e + b;
            long n = EXT - b < 20 * BLK ? EXT - b : 20 * BLK;
            copy_file_range(fd, &i, fd, &o, n, 0);
          }
        }
      }
      printf("%s %.4f\n", m == 0 ? "pread+pwrite" : m == 1 ? "cfr-block" : "cfr-run20", now() - t);
    }
  }
  close(fd);
  unlink(path);
  return 0;
}
