// The executor on blocks of host threads (tests/host_block.h): the one translation unit of the
// tests that instantiates src/device/lane_exec.h's runBlock, both builds of it, for every type.
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "src/device/lane_exec.h"
#include "tests/host_block.h"

namespace chorus::device {

void runOnHostThreads(const std::vector<std::vector<LaunchParams>>& launches, unsigned threads,
                      const std::vector<bool>& runs) {
  std::vector<std::thread> ranks;
  for (size_t r = 0; r < launches.size(); ++r) {
    if (!runs.empty() && !runs[r]) continue;
    ranks.emplace_back([&launches, r, threads] {
      for (const LaunchParams& whole : launches[r]) {
        // What a kernel gets: the first launchParamsBytes bytes (cuda::launch passes no more);
        // past them garbage, which a lane reading beyond its launch would trip on.
        auto given = std::make_unique<LaunchParams>();
        std::memset(static_cast<void*>(given.get()), 0xa5, sizeof(LaunchParams));
        std::memcpy(static_cast<void*>(given.get()), &whole, launchParamsBytes(whole));
        const LaunchParams& p = *given;
        std::vector<std::unique_ptr<BlockShared>> shared;
        std::vector<std::thread> pool;
        for (unsigned b = 0; b < p.nblocks; ++b) {
          shared.push_back(std::make_unique<BlockShared>(threads));
          BlockShared* s = shared.back().get();
          for (unsigned t = 0; t < threads; ++t) {
            pool.emplace_back([&p, s, b, t, threads] {
              HostBlock blk(*s, t, threads, b);
              runBlock(blk, p);
            });
          }
        }
        for (auto& t : pool) t.join();
      }
    });
  }
  for (auto& t : ranks) t.join();
}

void runBlockWithoutLL128(HostBlock& b, const LaunchParams& p) { runBlock<HostBlock, false>(b, p); }

}  // namespace chorus::device
