// Host entry points of the reductions in kernels/reduce.h, one instance per CPU ISA.
//
// kernels/reduce_host_isa.cc is compiled once per ISA (scalar without auto-vectorisation, AVX2,
// AVX-512) with floating-point contraction off, so every path gives the same bits; the best path
// the CPU supports is chosen at run time, and CHORUS_CPU_ISA=scalar|avx2|avx512 forces one.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "kernels/reduce.h"
#include "src/common/cpu_isa.h"

namespace chorus {

struct HostKernels {
  // dst = pre(src)
  void (*pre)(const ReduceSpec& s, int type, void* dst, const void* src, size_t n);
  // dst = post?(recv OP pre(local))
  void (*reduce)(const ReduceSpec& s, int type, void* dst, const void* recv, const void* local, size_t n, bool last);
  CpuIsa isa;
};

// The kernels of one ISA; nullopt when this CPU cannot run it.
std::optional<HostKernels> hostKernelsFor(CpuIsa isa);

namespace isa_scalar {
extern const HostKernels kKernels;
}
namespace isa_avx2 {
extern const HostKernels kKernels;
}
namespace isa_avx512 {
extern const HostKernels kKernels;
}

}  // namespace chorus
