#include "kernels/reduce_host.h"

namespace chorus {

std::optional<HostKernels> hostKernelsFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return isa_scalar::kKernels;
    case CpuIsa::kAvx2:
      if (__builtin_cpu_supports("avx2")) return isa_avx2::kKernels;
      return std::nullopt;
    case CpuIsa::kAvx512:
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return isa_avx512::kKernels;
      return std::nullopt;
  }
  return std::nullopt;
}

CpuIsa bestCpuIsa() {
  if (hostKernelsFor(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (hostKernelsFor(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

const char* cpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

std::optional<CpuIsa> parseCpuIsa(std::string_view name) {
  if (name == "scalar") return CpuIsa::kScalar;
  if (name == "avx2") return CpuIsa::kAvx2;
  if (name == "avx512") return CpuIsa::kAvx512;
  return std::nullopt;
}

}  // namespace chorus
