// The CPU instruction sets the host reductions are built for, and whether this CPU runs each.
#pragma once

#include <optional>
#include <string_view>

namespace chorus {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// Whether this CPU can run code built for `isa`.
bool cpuRuns(CpuIsa isa);
// The best ISA this CPU runs.
CpuIsa bestCpuIsa();
const char* cpuIsaName(CpuIsa isa);
std::optional<CpuIsa> parseCpuIsa(std::string_view name);

}  // namespace chorus
