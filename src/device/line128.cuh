// LL128's line accesses on the GPU (src/device/lane_protocols.h): the eight threads of a group move a
// 128-byte line (FifoLine128) in one warp-wide access, 16 bytes each, volatile so that a polled
// line is read from memory every time. The protocol rests on each such warp-wide 128-byte store
// reaching a 128-byte load whole; tests/device_test.cc's torn-line probe checks that on the GPU
// it runs on with these same two functions.
#pragma once

#include <cstdint>

#include "src/algo/fifo.h"

namespace chorus::device {

__device__ inline FifoLine loadLinePart(const FifoLine128* l, unsigned v) {
  FifoLine x;
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];"
               : "=l"(x.word[0]), "=l"(x.word[1])
               : "l"(l->word + 2 * v)
               : "memory");
  return x;
}

__device__ inline void storeLinePart(FifoLine128* l, unsigned v, uint64_t w0, uint64_t w1) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(l->word + 2 * v), "l"(w0), "l"(w1) : "memory");
}

}  // namespace chorus::device
