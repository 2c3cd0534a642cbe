#include "src/core/clique.h"

#include <atomic>
#include <string>
#include <thread>

#include "src/core/group.h"

namespace chorus {

Result<BootstrapId> makePrivateBootstrapId(const Config& cfg) {
  return makeRandomBootstrapId(cfg.socketIfname, cfg.initTimeout(), cfg.initWarnNs());
}

Status initClique(std::vector<std::shared_ptr<CommHandle>>* handles, int n) {
  CHORUS_ASSIGN_OR_RETURN(Config cfg, Config::fromEnv());
  CHORUS_ASSIGN_OR_RETURN(BootstrapId id, makePrivateBootstrapId(cfg));
  handles->assign(n, nullptr);
  std::vector<std::thread> threads;
  std::vector<Status> results(n);
  std::atomic<bool> cancel{false};
  std::atomic<int> first{-1};
  CommOptions options;
  options.cancelJoin = &cancel;
  for (int r = 0; r < n; ++r) {
    (*handles)[r] = std::make_shared<CommHandle>();
    InitJob job{(*handles)[r], id, r, n, options};
    threads.emplace_back([job, &results, &cancel, &first, r] {
      results[r] = runInit(job);
      int none = -1;
      if (!results[r].isOk() && first.compare_exchange_strong(none, r)) cancel.store(true, std::memory_order_release);
    });
  }
  for (auto& t : threads) t.join();
  if (first.load() < 0) return Status::ok();
  const Status bad = results[first.load()];
  std::string msg = "rank " + std::to_string(first.load()) + " of " + std::to_string(n) + ": " + bad.message();
  if (msg.find("too many open files") != std::string::npos) {
    msg += "; " + std::to_string(n) + " ranks in one process need about " + std::to_string(n * (kFdsPerRank + 1)) +
           " descriptors while they start";
  }
  return Status(bad.code(), msg);
}

}  // namespace chorus
