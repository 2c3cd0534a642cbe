#include "src/core/clique.h"

#include <atomic>
#include <string>
#include <thread>

#include "src/core/group.h"

namespace chorus {

Result<BootstrapId> makePrivateBootstrapId(const Config& cfg, std::shared_ptr<const std::atomic<bool>> stop) {
  return makeRandomBootstrapId(cfg.socketIfname, cfg.initTimeout(), cfg.initWarnNs(),
                               Logger(cfg.logLevel, cfg.logSubsys, -1), std::move(stop));
}

namespace {

// A clique's ranks share one process, and so its descriptor limit: a failure for want of
// descriptors says how many the whole clique needs.
Status withDescriptorNeed(const Status& s, int n) {
  if (s.isOk() || s.message().find("too many open files") == std::string::npos) return s;
  return Status(s.code(), s.message() + "; " + std::to_string(n) + " ranks in one process need about " +
                              std::to_string(n * (kFdsPerRank + 1)) + " descriptors while they start");
}

}  // namespace

Status initClique(std::vector<std::shared_ptr<CommHandle>>* handles, int n, const int* devlist) {
  CHORUS_ASSIGN_OR_RETURN(Config cfg, Config::fromEnv());
  InitCancel cancel;
  Result<BootstrapId> id = makePrivateBootstrapId(cfg, cancel.rootStop());
  if (!id.isOk()) return withDescriptorNeed(id.status(), n);
  handles->assign(n, nullptr);
  std::vector<std::thread> threads;
  std::vector<Status> results(n);
  std::atomic<int> first{-1};
  CommOptions options;
  options.cancel = &cancel;
  for (int r = 0; r < n; ++r) {
    (*handles)[r] = std::make_shared<CommHandle>();
    // Without a devlist, each rank's device is its first device buffer's (several ranks may share
    // one): the current device of a fresh init thread says nothing.
    options.cudaDevice = devlist ? devlist[r] : -1;
    options.deviceFromCurrent = false;
    InitJob job{(*handles)[r], id.value(), r, n, options, nullptr};
    threads.emplace_back([job, &results, &cancel, &first, r] {
      results[r] = runInit(job);
      int none = -1;
      if (!results[r].isOk() && first.compare_exchange_strong(none, r)) cancel.cancel();
    });
  }
  for (auto& t : threads) t.join();
  if (first.load() < 0) return Status::ok();
  const Status bad = results[first.load()];
  return withDescriptorNeed(
      Status(bad.code(), "rank " + std::to_string(first.load()) + " of " + std::to_string(n) + ": " + bad.message()),
      n);
}

}  // namespace chorus
