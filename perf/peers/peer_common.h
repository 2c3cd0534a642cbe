/* What the peer programs of tools/compare_peers.py share (C, and C++ for Gloo's): sizes as
 * nccl-tests take them, the inputs every rank contributes, and the row each prints per size in
 * all_reduce_perf's layout (size count type redop root time algbw busbw #wrong), so that one
 * parser reads every contender. */
#ifndef CHORUS_PEER_COMMON_H
#define CHORUS_PEER_COMMON_H

#include <stdio.h>
#include <stdlib.h>

/* A number with an optional K, M or G (powers of 1024). */
static inline size_t peerParseSize(const char* text) {
  char* end = NULL;
  const size_t v = strtoull(text, &end, 0);
  switch (*end) {
    case 'K':
    case 'k':
      return v << 10;
    case 'M':
    case 'm':
      return v << 20;
    case 'G':
    case 'g':
      return v << 30;
    default:
      return v;
  }
}

/* Element i of rank's input: small integers, so any order of summing them is exact in float. */
static inline float peerInput(int rank, size_t i) { return (float)((rank + i) % 5); }

static inline void peerHeader(const char* what) {
  printf("# %s\n", what);
  printf("#       size      count   type  redop  root   time(us)  algbw  busbw  #wrong\n");
}

static inline void peerRow(size_t bytes, const char* redop, double us, double algbw, double busbw, long wrong) {
  printf("%12zu %10zu  float %6s    -1 %10.2f %6.2f %6.2f %7ld\n", bytes, bytes / sizeof(float), redop, us, algbw,
         busbw, wrong);
  fflush(stdout);
}

#endif
