#include "kernels/reduce_host.h"

namespace chorus {

std::optional<HostKernels> hostKernelsFor(CpuIsa isa) {
  if (!cpuRuns(isa)) return std::nullopt;
  switch (isa) {
    case CpuIsa::kScalar:
      return isa_scalar::kKernels;
    case CpuIsa::kAvx2:
      return isa_avx2::kKernels;
    case CpuIsa::kAvx512:
      return isa_avx512::kKernels;
  }
  return std::nullopt;
}

}  // namespace chorus
