#include "src/device/gpu_reach.h"

#include <cctype>

namespace chorus::cuda {

bool parseGpuUuid(const std::string& text, uint64_t out[2]) {
  if (text.compare(0, 4, "GPU-") != 0) return false;
  unsigned char bytes[16];
  int nibbles = 0;
  for (size_t i = 4; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c)) || nibbles == 32) return false;
    const int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
    bytes[nibbles / 2] = static_cast<unsigned char>(nibbles % 2 ? (bytes[nibbles / 2] << 4) | v : v);
    ++nibbles;
  }
  if (nibbles != 32) return false;
  // As the 16 bytes of cudaUUID_t are copied into GpuIdentity::uuid: memory order, little-endian words.
  for (int w = 0; w < 2; ++w) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | bytes[8 * w + b];
    out[w] = v;
  }
  return true;
}

std::vector<std::vector<uint64_t>> reachFromMachine(const uint64_t self[2], const std::vector<MachineGpu>& machine) {
  std::vector<std::vector<uint64_t>> out{{self[0], self[1]}};
  for (const MachineGpu& g : machine) {
    if (!g.peerReadWrite) continue;
    bool seen = false;
    for (const auto& u : out) seen = seen || (u[0] == g.uuid[0] && u[1] == g.uuid[1]);
    if (!seen) out.push_back({g.uuid[0], g.uuid[1]});
  }
  return out;
}

std::vector<int> devicesGranted(int owner, int count, const std::function<bool(int, int)>& canAccessPeer) {
  std::vector<int> out{owner};
  for (int d = 0; d < count; ++d) {
    if (d != owner && canAccessPeer(d, owner)) out.push_back(d);
  }
  return out;
}

}  // namespace chorus::cuda
