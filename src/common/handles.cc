#include "src/common/handles.h"

#include <atomic>

namespace chorus {

uintptr_t nextHandleValue() {
  // Non-canonical on x86-64 and AArch64 (bits 48-63 neither all zeros nor all ones): a handle
  // that someone dereferences faults at once. Sixteen-byte steps keep values aligned.
  static std::atomic<uint64_t> serial{1};
  return static_cast<uintptr_t>(0x4348000000000000ull | (serial.fetch_add(1, std::memory_order_relaxed) << 4));
}

}  // namespace chorus
