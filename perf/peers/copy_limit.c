/* The `limit` column of tools/compare_peers.py: what one thread copies per second (memcpy, GB/s)
 * while `-t` threads (default 2, one per rank of a 2-rank all-reduce) copy at once, each between
 * buffers of its own, per size. An all-reduce between two processes moves every byte through at
 * least one such copy on each rank, so its bus bandwidth cannot pass this. Printed in
 * all_reduce_perf's row layout, the rate in both bandwidth columns.
 *   copy_limit -b MIN -e MAX -f FACTOR -n ITERS [-t THREADS] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "peer_common.h"

struct worker {
  pthread_t thread;
  pthread_barrier_t* start;
  char* src;
  char* dst;
  size_t bytes;
  int iters;
  double seconds;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void* copyLoop(void* arg) {
  struct worker* w = arg;
  memcpy(w->dst, w->src, w->bytes); /* warm the pages and the caches as a steady state would */
  pthread_barrier_wait(w->start);
  const double t0 = now();
  for (int i = 0; i < w->iters; ++i) {
    memcpy(w->dst, w->src, w->bytes);
    __asm__ __volatile__("" : : "r"(w->dst) : "memory"); /* every copy happens */
  }
  w->seconds = now() - t0;
  return NULL;
}

int main(int argc, char** argv) {
  size_t minBytes = 64 << 10, maxBytes = 64 << 20, factor = 2;
  int iters = 20, threads = 2, opt;
  while ((opt = getopt(argc, argv, "b:e:f:n:t:w:")) != -1) {
    switch (opt) {
      case 'b':
        minBytes = peerParseSize(optarg);
        break;
      case 'e':
        maxBytes = peerParseSize(optarg);
        break;
      case 'f':
        factor = strtoull(optarg, NULL, 0);
        break;
      case 'n':
        iters = atoi(optarg);
        break;
      case 't':
        threads = atoi(optarg);
        break;
      case 'w':
        break; /* taken for the same command line as the others; one warm copy is made */
      default:
        fprintf(stderr, "usage: copy_limit -b MIN -e MAX -f FACTOR -n ITERS [-t THREADS]\n");
        return 2;
    }
  }
  if (minBytes < 1 || maxBytes < minBytes || factor < 2 || iters < 1 || threads < 1 || threads > 64) {
    fprintf(stderr, "copy_limit: need 1 <= MIN <= MAX, FACTOR >= 2, ITERS >= 1, 1 <= THREADS <= 64\n");
    return 2;
  }
  char what[80];
  snprintf(what, sizeof(what), "copy limit: memcpy GB/s of one thread while %d copy at once", threads);
  peerHeader(what);
  struct worker w[64];
  for (int t = 0; t < threads; ++t) {
    w[t].src = malloc(maxBytes);
    w[t].dst = malloc(maxBytes);
    if (!w[t].src || !w[t].dst) {
      fprintf(stderr, "copy_limit: cannot allocate 2 x %zu bytes per thread\n", maxBytes);
      return 1;
    }
    memset(w[t].src, t + 1, maxBytes);
    memset(w[t].dst, 0, maxBytes);
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int t = 0; t < threads; ++t) {
      w[t].start = &start;
      w[t].bytes = bytes;
      w[t].iters = iters;
      pthread_create(&w[t].thread, NULL, copyLoop, &w[t]);
    }
    double slowest = 0;
    for (int t = 0; t < threads; ++t) {
      pthread_join(w[t].thread, NULL);
      if (w[t].seconds > slowest) slowest = w[t].seconds;
    }
    pthread_barrier_destroy(&start);
    const double us = slowest * 1e6 / iters;
    peerRow(bytes, "copy", us, bytes / us / 1e3, bytes / us / 1e3, 0);
  }
  for (int t = 0; t < threads; ++t) {
    free(w[t].src);
    free(w[t].dst);
  }
  return 0;
}
