// The device grids' values and references (cuda_coll_test: ranks as threads of one process;
// cuda_proc_test: ranks as processes): element i of rank r is a small integer, exact in every type,
// whose sums and products over 4 ranks stay exact too, so each result is checked byte for byte
// against a reference computed here. The collectives are the host grid's (tests/grid/grid.h, its
// header alone: these programs link the shared library, not the grid's static one).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "include/chorus/chorus.h"
#include "kernels/numeric.h"
#include "tests/grid/grid.h"

namespace chorus::test {

inline const size_t kTypeSize[chorusNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
inline const char* const kTypeName[chorusNumTypes] = {"int8", "uint8", "int32",  "uint32", "int64",   "uint64",
                                                      "half", "float", "double", "bf16",   "fp8e4m3", "fp8e5m2"};
// The operators by index: chorusSum..chorusAvg (0-4), then chorusBand, chorusBor, chorusBxor (5-7,
// integer types only).
inline const char* const kOpName[] = {"sum", "prod", "max", "min", "avg", "band", "bor", "bxor"};
inline int opCount(int t) { return t >= chorusFloat16 ? 5 : 8; }
inline chorusRedOp_t redOpOf(int op) {
  return op < chorusNumOps ? static_cast<chorusRedOp_t>(op)
                           : static_cast<chorusRedOp_t>(chorusBand + (op - chorusNumOps));
}

inline bool isUnsigned(int t) { return t == chorusUint8 || t == chorusUint32 || t == chorusUint64; }

// Element i of rank r: a small integer, exact in every type, whose sums and products over 4 ranks
// stay exact too.
inline int valueOf(int t, int r, size_t i) {
  return isUnsigned(t) ? static_cast<int>((i * 7 + r * 13) % 3) : static_cast<int>((i * 7 + r * 13) % 5) - 2;
}

inline void encode(int t, double v, unsigned char* p) {
  switch (t) {
    case chorusInt8: {
      int8_t x = static_cast<int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case chorusUint8: {
      uint8_t x = static_cast<uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case chorusInt32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case chorusUint32: {
      uint32_t x = static_cast<uint32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case chorusInt64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case chorusUint64: {
      uint64_t x = static_cast<uint64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case chorusFloat16: {
      Half x = fromFloat<Half>(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case chorusFloat32: {
      float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case chorusFloat64:
      std::memcpy(p, &v, 8);
      break;
    case chorusBfloat16: {
      BFloat16 x = fromFloat<BFloat16>(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case chorusFloat8e4m3: {
      Fp8E4M3 x = fromFloat<Fp8E4M3>(static_cast<float>(v));
      std::memcpy(p, &x, 1);
      break;
    }
    default: {
      Fp8E5M2 x = fromFloat<Fp8E5M2>(static_cast<float>(v));
      std::memcpy(p, &x, 1);
      break;
    }
  }
}

using Bytes = std::vector<unsigned char>;

inline double decode(int t, const unsigned char* p) {
  switch (t) {
    case chorusInt8:
      return static_cast<int8_t>(*p);
    case chorusUint8:
      return *p;
    case chorusFloat16: {
      Half x;
      std::memcpy(&x, p, 2);
      return toFloat(x);
    }
    case chorusBfloat16: {
      BFloat16 x;
      std::memcpy(&x, p, 2);
      return toFloat(x);
    }
    case chorusFloat8e4m3: {
      Fp8E4M3 x;
      std::memcpy(&x, p, 1);
      return toFloat(x);
    }
    case chorusFloat8e5m2: {
      Fp8E5M2 x;
      std::memcpy(&x, p, 1);
      return toFloat(x);
    }
    case chorusFloat32: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case chorusFloat64: {
      double x;
      std::memcpy(&x, p, 8);
      return x;
    }
    default:
      return 0;  // integers are compared as bytes
  }
}
inline bool isFloat(int t) { return t >= chorusFloat16; }
// The relative rounding step of a floating type.
inline double epsilonOf(int t) {
  switch (t) {
    case chorusFloat16:
      return 0x1p-10;
    case chorusBfloat16:
      return 0x1p-7;
    case chorusFloat8e4m3:
      return 0x1p-3;
    case chorusFloat8e5m2:
      return 0x1p-2;
    case chorusFloat32:
      return 0x1p-23;
    default:
      return 0x1p-52;
  }
}

inline Bytes values(int t, int r, size_t count, size_t offset = 0) {
  Bytes b(count * kTypeSize[t]);
  for (size_t i = 0; i < count; ++i) encode(t, valueOf(t, r, offset + i), b.data() + i * kTypeSize[t]);
  return b;
}

// The exact reduction of element i over n ranks (op: an index of kOpName but avg).
inline double reduced(int t, int op, int n, size_t i) {
  double acc = valueOf(t, 0, i);
  if (op > chorusAvg) {  // bitwise, on the values' two's complement bits
    int64_t bits = valueOf(t, 0, i);
    for (int r = 1; r < n; ++r) {
      const int64_t v = valueOf(t, r, i);
      bits = op == 5 ? (bits & v) : op == 6 ? (bits | v) : (bits ^ v);
    }
    return static_cast<double>(bits);
  }
  for (int r = 1; r < n; ++r) {
    const double v = valueOf(t, r, i);
    acc = op == chorusSum    ? acc + v
          : op == chorusProd ? acc * v
          : op == chorusMax  ? std::fmax(acc, v)
                             : std::fmin(acc, v);
  }
  return acc;
}

inline const char* const kCollName[] = {"allreduce", "broadcast", "reduce",   "allgather",  "reducescatter", "alltoall",
                                        "gather",    "scatter",   "sendrecv", "allgatherv", "reducescatterv"};
inline bool reduces(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter || c == Coll::kReduceScatterV;
}
// The v-collectives' blocks for `count`, as the host grid's (vCounts): rank r's count + r
// elements, every third rank's none; packed in rank order (vDispl: where rank r's begins).
inline size_t vCountOf(size_t count, int r) { return r % 3 == 1 ? 0 : count + static_cast<size_t>(r); }
inline size_t vDispl(size_t count, int r) {
  size_t at = 0;
  for (int q = 0; q < r; ++q) at += vCountOf(count, q);
  return at;
}
inline std::vector<size_t> vCountsOf(size_t count, int n) {
  std::vector<size_t> v(n);
  for (int r = 0; r < n; ++r) v[r] = vCountOf(count, r);
  return v;
}
// Elements of rank r's input and output for `count`.
inline size_t inCount(Coll c, size_t count, int n, int r) {
  if (c == Coll::kAllGatherV) return vCountOf(count, r);
  if (c == Coll::kReduceScatterV) return vDispl(count, n);
  return c == Coll::kReduceScatter || c == Coll::kAlltoAll || c == Coll::kScatter ? count * n : count;
}
inline size_t outCount(Coll c, size_t count, int n, int r) {
  if (c == Coll::kAllGatherV) return vDispl(count, n);
  if (c == Coll::kReduceScatterV) return vCountOf(count, r);
  return c == Coll::kAllGather || c == Coll::kAlltoAll || c == Coll::kGather ? count * n : count;
}

// One rank's call `c` (send/recv: to the next rank, from the previous one).
inline chorusResult_t issueOne(Coll c, chorusComm_t cm, int r, int n, const void* in, void* out, size_t count, int type,
                               int op, int root, chorusStream_t s) {
  const auto t = static_cast<chorusDataType_t>(type);
  const chorusRedOp_t o = redOpOf(op);
  switch (c) {
    case Coll::kAllReduce:
      return chorusAllReduce(in, out, count, t, o, cm, s);
    case Coll::kBroadcast:
      return chorusBroadcast(in, out, count, t, root, cm, s);
    case Coll::kReduce:
      return chorusReduce(in, out, count, t, o, root, cm, s);
    case Coll::kAllGather:
      return chorusAllGather(in, out, count, t, cm, s);
    case Coll::kReduceScatter:
      return chorusReduceScatter(in, out, count, t, o, cm, s);
    case Coll::kAlltoAll:
      return chorusAlltoAll(in, out, count, t, cm, s);
    case Coll::kGather:
      return chorusGather(in, out, count, t, root, cm, s);
    case Coll::kScatter:
      return chorusScatter(in, out, count, t, root, cm, s);
    case Coll::kSendRecv: {
      chorusGroupStart();
      chorusResult_t rc = chorusSend(in, count, t, (r + 1) % n, cm, s);
      if (rc == chorusSuccess) rc = chorusRecv(out, count, t, (r + n - 1) % n, cm, s);
      const chorusResult_t end = chorusGroupEnd();
      return rc != chorusSuccess ? rc : end;
    }
    case Coll::kAllGatherV: {
      const std::vector<size_t> v = vCountsOf(count, n);
      return chorusAllGatherV(in, v[r], out, v.data(), nullptr, t, cm, s);
    }
    case Coll::kReduceScatterV: {
      const std::vector<size_t> v = vCountsOf(count, n);
      return chorusReduceScatterV(in, v.data(), nullptr, out, v[r], t, o, cm, s);
    }
  }
  return chorusInvalidArgument;
}

// What rank r's output must hold for the exact ops (reductions but avg); false: no independent
// reference for this case (avg, whose result is checked against the host path only).
inline bool expected(Coll c, int t, int op, int n, int r, int root, size_t count, Bytes* want, const Bytes& before) {
  if (reduces(c) && op == chorusAvg) return false;
  const size_t es = kTypeSize[t];
  *want = before;
  auto put = [&](size_t at, double v) { encode(t, v, want->data() + at * es); };
  switch (c) {
    case Coll::kAllReduce:
      for (size_t i = 0; i < count; ++i) put(i, reduced(t, op, n, i));
      break;
    case Coll::kReduce:
      if (r == root)
        for (size_t i = 0; i < count; ++i) put(i, reduced(t, op, n, i));
      break;
    case Coll::kReduceScatter:
      for (size_t i = 0; i < count; ++i) put(i, reduced(t, op, n, r * count + i));
      break;
    case Coll::kBroadcast:
      for (size_t i = 0; i < count; ++i) put(i, valueOf(t, root, i));
      break;
    case Coll::kAllGather:
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < count; ++i) put(q * count + i, valueOf(t, q, i));
      break;
    case Coll::kAlltoAll:
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < count; ++i) put(q * count + i, valueOf(t, q, r * count + i));
      break;
    case Coll::kGather:
      if (r == root)
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) put(q * count + i, valueOf(t, q, i));
      break;
    case Coll::kScatter:
      for (size_t i = 0; i < count; ++i) put(i, valueOf(t, root, r * count + i));
      break;
    case Coll::kSendRecv:
      for (size_t i = 0; i < count; ++i) put(i, valueOf(t, (r + n - 1) % n, i));
      break;
    case Coll::kAllGatherV:
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < vCountOf(count, q); ++i) put(vDispl(count, q) + i, valueOf(t, q, i));
      break;
    case Coll::kReduceScatterV:
      for (size_t i = 0; i < vCountOf(count, r); ++i) put(i, reduced(t, op, n, vDispl(count, r) + i));
      break;
  }
  return true;
}

}  // namespace chorus::test
