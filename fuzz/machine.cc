// Fuzzes the machine description every rank receives from every other at init: parseMachine
// either fails with a message or returns a machine that the rest of the topology code (describe,
// placement, rings, channels) handles, and that serializes and parses back to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/topo/topo.h"

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::topo;
  auto m = parseMachine(std::string(reinterpret_cast<const char*>(data), size));
  if (!m.isOk()) {
    require(!m.status().message().empty());
    return 0;
  }
  const Machine& machine = m.value();
  const std::string text = serialize(machine);
  auto back = parseMachine(text);
  require(back.isOk() && serialize(back.value()) == text);
  (void)describe(machine);
  // Two ranks on this machine and two on a second copy of it.
  std::vector<Machine> hosts{machine, machine};
  std::vector<RankPlace> ranks;
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 2; ++l) ranks.push_back(placeRank(machine, l, 2, -1));
    ranks[ranks.size() - 1].host = ranks[ranks.size() - 2].host = h;
  }
  for (const RankPlace& r : ranks) (void)nearestNic(machine, r);
  auto channels = buildChannels(ranks, hosts, 2);
  for (const ChannelPlan& c : channels) require(c.ring.size() == ranks.size());
  return 0;
}
