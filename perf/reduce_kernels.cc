// How fast each host reduction kernel runs, per type, operator and instruction set: one pass
// dst = recv OP pre(local) over operands that fit in L2 (best of -n runs), in GB/s of one operand.
// What an all-reduce's reduction steps cost at most; a type far below memcpy is a kernel to fix.
//
//   reduce_kernels [-b BYTES] [-n RUNS]     defaults: 256 KiB per operand, 50 runs
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/reduce_host.h"

namespace {

using chorus::CpuIsa;
using chorus::RedKind;
using chorus::ReduceSpec;

struct TypeRow {
  int id;
  const char* name;
  size_t size;
  bool floating;
};
constexpr TypeRow kTypes[] = {{0, "int8", 1, false},    {1, "uint8", 1, false},  {2, "int32", 4, false},
                              {3, "uint32", 4, false},  {4, "int64", 8, false},  {5, "uint64", 8, false},
                              {6, "float16", 2, true},  {7, "float32", 4, true}, {8, "float64", 8, true},
                              {9, "bfloat16", 2, true}, {10, "f8e4m3", 1, true}, {11, "f8e5m2", 1, true}};

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 256 << 10;
  int runs = 50;
  int opt;
  while ((opt = getopt(argc, argv, "b:n:")) != -1) {
    if (opt == 'b') bytes = std::strtoull(optarg, nullptr, 0);
    if (opt == 'n') runs = std::atoi(optarg);
  }
  // 0x3c in every byte is a small finite value in every type (1.0-ish in fp16 and bf16).
  std::vector<unsigned char> a(bytes, 0x3c), b(bytes, 0x3c), d(bytes);
  std::printf("# GB/s of one %zu-byte operand per pass; best of %d\n", bytes, runs);
  std::printf("%-9s %-7s %8s %8s %8s %8s\n", "type", "isa", "sum", "prod", "max", "premul");
  for (const TypeRow& t : kTypes) {
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      auto k = chorus::hostKernelsFor(isa);
      if (!k) continue;
      std::printf("%-9s %-7s", t.name, chorus::cpuIsaName(isa));
      const size_t n = bytes / t.size;
      for (int col = 0; col < 4; ++col) {
        ReduceSpec s;
        s.kind = col == 1 ? RedKind::kProd : col == 2 ? RedKind::kMax : RedKind::kSum;
        s.hasPre = col == 3;  // avg and PreMulSum: multiply the local operand first
        s.scaleF = 0.5;
        s.scaleI = 3;
        double best = 1e30;
        for (int r = 0; r < runs; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          k->reduce(s, t.id, d.data(), a.data(), b.data(), n, true);
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (secs < best) best = secs;
        }
        std::printf(" %8.2f", static_cast<double>(bytes) / best / 1e9);
      }
      std::printf("\n");
    }
  }
  return 0;
}
