// One ISA's instance of the host reductions; CHORUS_ISA_NS and CHORUS_ISA_ENUM come from the build.
#include "kernels/reduce.h"
#include "kernels/reduce_host.h"

namespace chorus::CHORUS_ISA_NS {
namespace {

void preImpl(const ReduceSpec& s, int type, void* dst, const void* src, size_t n) {
  dispatchType(type, [&]<typename T>() { reducePre<T>(s, dst, src, n); });
}

void reduceImpl(const ReduceSpec& s, int type, void* dst, const void* recv, const void* local, size_t n, bool last) {
  dispatchType(type, [&]<typename T>() { reduceStep<T>(s, dst, recv, local, n, last); });
}

}  // namespace

const HostKernels kKernels = {&preImpl, &reduceImpl, CpuIsa::CHORUS_ISA_ENUM};

}  // namespace chorus::CHORUS_ISA_NS
