#include "src/core/group.h"

#include <algorithm>
#include <thread>

#include "src/common/guard.h"
#include "src/common/os.h"
#include "src/core/stream.h"

namespace chorus {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<OpInfo> ops;
  std::vector<InitJob> inits;
  Status error;
};

thread_local GroupState tGroup;

}  // namespace

bool inGroup() { return tGroup.depth > 0; }
void groupStart() { ++tGroup.depth; }

void groupFail(const Status& s) {
  if (tGroup.depth > 0 && tGroup.error.isOk()) tGroup.error = s;
}

namespace {
// An API call that fails inside a group fails the group too (src/common/guard.h).
[[maybe_unused]] const bool kGroupHooked = (setApiErrorHook(&groupFail), true);
}  // namespace

bool deferInit(const InitJob& job) {
  if (tGroup.depth == 0) return false;
  tGroup.inits.push_back(job);
  return true;
}

Status submitOp(const OpInfo& op) {
  if (tGroup.depth > 0) {
    tGroup.ops.push_back(op);
    return Status::ok();
  }
  // A lone host collective that runs inline over connections already made skips launch()'s
  // grouping and connection checks: there is nothing for them to do.
  if (const std::optional<Algo> algo = op.comm->hostPath().loneInlineAlgo(op)) return launchInline(op, *algo);
  std::vector<OpInfo> ops{op};
  return launch(ops);
}

Status runInit(const InitJob& job) {
  CommHandle* h = job.handle.get();
  CommOptions options = job.options;
  if (!options.cancel) options.cancel = &h->initCancel;
  auto r = job.make ? job.make() : Communicator::create(job.id, job.rank, job.nranks, options, nullptr);
  Status s = r.status();
  std::lock_guard<std::mutex> g(h->initMu);
  if (r.isOk()) h->impl = r.take();
  h->initStatus = s;
  h->initDone.store(true, std::memory_order_release);
  return s;
}

namespace {

// Handles of inits recorded in a group exist; one that will not run must not look "in progress"
// forever.
void failInits(const std::vector<InitJob>& inits, const Status& s) {
  for (const auto& job : inits) {
    std::lock_guard<std::mutex> lk(job.handle->initMu);
    job.handle->initStatus = s;
    job.handle->initDone.store(true, std::memory_order_release);
  }
}

}  // namespace

Result<double> groupSimulateEnd() {
  if (tGroup.depth == 0) {
    return invalidUsage("chorusGroupSimulateEnd without a matching chorusGroupStart on this thread");
  }
  if (--tGroup.depth > 0) return 0.0;
  GroupState g = std::move(tGroup);
  tGroup = GroupState();
  if (!g.error.isOk()) {
    Status s(g.error.code(), "a call inside this group failed: " + g.error.message());  // its own code
    failInits(g.inits, s);
    return s;
  }
  if (!g.inits.empty()) {
    Status s = invalidUsage(
        "chorusGroupSimulateEnd cannot simulate communicator inits; end their group with "
        "chorusGroupEnd");
    failInits(g.inits, s);
    return s;
  }
  std::vector<std::pair<Communicator*, double>> perComm;
  for (const OpInfo& op : g.ops) {
    auto it = std::find_if(perComm.begin(), perComm.end(), [&](const auto& p) { return p.first == op.comm; });
    if (it == perComm.end()) it = perComm.insert(perComm.end(), {op.comm, 0.0});
    it->second += estimateUs(op, op.comm->tuner(), op.comm->nranks());
  }
  double slowest = 0;
  for (const auto& [c, us] : perComm) slowest = std::max(slowest, us);
  return slowest;
}

Status groupEnd() {
  if (tGroup.depth == 0) {
    return invalidUsage("chorusGroupEnd without a matching chorusGroupStart on this thread");
  }
  if (--tGroup.depth > 0) return Status::ok();
  GroupState g = std::move(tGroup);
  tGroup = GroupState();
  if (!g.error.isOk()) {
    // The failed call's own code, as NCCL's group returns it.
    Status s(g.error.code(),
             "a call inside this group failed, so nothing in the group was launched: " + g.error.message());
    failInits(g.inits, s);
    return s;
  }
  if (!g.inits.empty()) {
    // Every init and split of the group runs at once: ranks of one clique driven by one thread
    // must all join the bootstrap (or the parent's exchange) together. Non-blocking handles keep
    // running in the background. The group's operations, on communicators made before it, run
    // after.
    std::vector<std::thread> threads;
    std::vector<Status> results(g.inits.size());
    for (size_t i = 0; i < g.inits.size(); ++i) {
      const InitJob job = g.inits[i];
      if (!job.options.blocking) {
        job.handle->initThread = std::thread([job] { (void)runInit(job); });
        results[i] = Status(chorusInProgress, "");
        continue;
      }
      threads.emplace_back([job, &results, i] { results[i] = runInit(job); });
    }
    for (auto& t : threads) t.join();
    Status pending;  // a non-blocking init's chorusInProgress, returned after the operations launch
    for (const auto& s : results) {
      if (s.inProgress()) {
        pending = s;
      } else if (!s.isOk()) {
        return s;
      }
    }
    if (!g.ops.empty()) CHORUS_TRY(launch(g.ops));
    return pending;
  }
  if (g.ops.empty()) return Status::ok();
  return launch(g.ops);
}

namespace {

// Runs a launch's tasks on the calling thread (the user's, for the NULL stream, or a stream's
// worker) when every communicator's execution token is free: no hand-off to an engine thread and
// back, which is most of a small operation's time. Returns false, having changed nothing, when a
// token is held (the engine or another thread runs that communicator): the caller then submits
// to the engines. The idle policy and the deadlines are the engine's.
bool runInline(std::vector<std::unique_ptr<Task>>& tasks, const IdlePolicy& policy) {
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i]->owner()->tryAcquireExec()) {
      tasks[i]->holdsExec = true;
      continue;
    }
    for (size_t j = 0; j < i; ++j) {
      tasks[j]->holdsExec = false;
      tasks[j]->owner()->releaseExec();
    }
    return false;
  }
  size_t left = tasks.size();
  IdleLoop idle(policy);
  idle.refreshClock();
  for (auto& t : tasks) t->lastProgressNs = idle.now();
  while (left > 0) {
    bool movedAny = false;
    WaitInfo first;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i]->finished) continue;
      WaitInfo w;
      bool moved = false;
      Status s = tasks[i]->advance(idle.now(), &w, &moved);
      movedAny = movedAny || moved;
      if (s.inProgress()) {
        if (!first.word) first = w;
        continue;
      }
      tasks[i]->finished = true;
      tasks[i]->finish(s);
      --left;
      movedAny = true;
    }
    if (left > 0) idle.after(movedAny, first);
  }
  return true;
}

// The ops of one communicator in one launch, in issue order.
struct CommOps {
  Communicator* comm;
  std::shared_ptr<Stream> stream;
  std::vector<OpInfo> ops;
  // Other CUDA streams the communicator's ops of this group came on: joined with `stream` (the
  // launch waits for each, and each for the launch), as NCCL joins a group's streams.
  std::vector<std::shared_ptr<Stream>> also = {};
};

// Ops of one communicator in one group on two streams, not all CUDA ones.
Status twoStreams(const OpInfo& op) {
  return invalidUsage(
      "operations of one communicator in one group must use one stream unless all are CUDA streams "
      "(rank " +
      std::to_string(op.comm->rank()) +
      " used a host stream or the NULL stream and another); CUDA streams are joined, as in NCCL");
}

// tasks[i] belongs to work[i].comm.
void submitToEngines(std::vector<CommOps>& work, std::vector<std::unique_ptr<Task>>& tasks) {
  for (size_t i = 0; i < tasks.size(); ++i) work[i].comm->engine().submit(std::move(tasks[i]));
}

// Plans the tasks of the communicators that share one stream and runs them: inline when their
// execution tokens are free, else on their engines. Runs on the stream's worker (or, for the
// NULL stream, on the caller), so a stream's per-op work is done where its memory is freed, and
// the thread that enqueues pays only for validation. Every communicator was counted as having
// a task outstanding when the work was accepted; each count is given back exactly once.
Status planAndRun(std::vector<CommOps>& work) {
  std::vector<std::unique_ptr<Task>> tasks;
  tasks.reserve(work.size());
  Status failed;
  for (auto& w : work) {
    auto r = w.comm->hostPath().plan(w.ops);
    if (!r.isOk()) {
      failed = r.status();
      break;
    }
    tasks.push_back(r.take());
  }
  if (!failed.isOk()) {
    for (auto& w : work) {
      w.comm->health().setAsyncError(failed);
      w.comm->work().finished();
    }
    return failed;
  }
  LaunchLatch latch(static_cast<int>(tasks.size()));
  for (size_t i = 0; i < tasks.size(); ++i) {
    Communicator* c = work[i].comm;
    tasks[i]->setOnDone([c, &latch](const Status& st) {
      latch.done(st);
      c->work().finished();
    });
  }
  if (!runInline(tasks, work[0].comm->hostPath().idlePolicy())) submitToEngines(work, tasks);
  return latch.wait();
}

// CHORUS_CHECK: the communicators of a launch compare their collectives with their peers, each on
// a thread of its own when there are several (one thread may drive several ranks of a clique).
// A difference fails the communicator: its ranks no longer agree on what comes next.
Status checkAgreement(std::vector<CommOps>& work) {
  bool any = false;
  for (auto& w : work) any = any || w.comm->config().check;
  if (!any) return Status::ok();
  std::vector<Status> result(work.size());
  if (work.size() == 1) {
    result[0] = work[0].comm->checkAgreement(work[0].ops);
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < work.size(); ++i) {
      threads.emplace_back([&, i] { result[i] = work[i].comm->checkAgreement(work[i].ops); });
    }
    for (auto& t : threads) t.join();
  }
  for (size_t i = 0; i < work.size(); ++i) {
    if (!result[i].isOk()) work[i].comm->health().setAsyncError(result[i]);
  }
  for (const Status& s : result) {
    if (!s.isOk()) return s;
  }
  return Status::ok();
}

// Checks each communicator's ops, compares collectives under CHORUS_CHECK, and makes the
// connections (host or device, as the ops are) still needed. Connections are made for all
// communicators of the launch together: one thread may drive several ranks of a clique, and their
// connection phases must interleave.
Status checkAndConnect(std::vector<CommOps>& work) {
  std::vector<std::pair<Communicator*, std::vector<Communicator::ConnNeed>>> needs;
  for (auto& w : work) {
    CHORUS_TRY(checkOps(w.ops, w.comm->rank(), w.comm->nranks()));
    auto n = w.comm->connectionsNeeded(w.ops);
    if (n.empty()) continue;
    needs.emplace_back(w.comm, std::move(n));
  }
  CHORUS_TRY(checkAgreement(work));
  if (needs.empty()) return Status::ok();
  Status s = Communicator::connect(needs);
  if (!s.isOk()) {
    for (auto& n : needs) n.first->health().setAsyncError(s);
  }
  return s;
}

}  // namespace

namespace {

// Device operations: checked and connected on the calling thread, for every communicator together;
// the rest is the device path's (DevicePath::launch).
Status launchDevice(std::vector<CommOps>& work) {
  for (auto& w : work) {
    CHORUS_TRY(w.comm->health().asyncError());
    if (w.comm->health().aborted()) return remoteError("the communicator was aborted");
    CHORUS_TRY(w.comm->devicePath().ensure());
  }
  CHORUS_TRY(checkAndConnect(work));
  std::vector<DeviceWork> device;
  device.reserve(work.size());
  for (const CommOps& w : work) device.push_back(DeviceWork{w.comm, w.stream, &w.ops, &w.also});
  return DevicePath::launch(device);
}

// The ops of a launch by communicator, in issue order (one stream per communicator).
Status byComm(std::vector<OpInfo>& ops, std::vector<CommOps>* work) {
  for (const auto& op : ops) {
    CommOps* w = nullptr;
    for (auto& x : *work) {
      if (x.comm == op.comm) w = &x;
    }
    if (!w) {
      work->push_back(CommOps{op.comm, op.stream, {}});
      w = &work->back();
    } else if (w->stream != op.stream) {
      // CUDA streams are joined, as NCCL joins them; a host stream or the NULL stream has no
      // events to join with.
      if (!(w->stream && w->stream->isCuda() && op.stream && op.stream->isCuda())) return twoStreams(op);
      if (std::find(w->also.begin(), w->also.end(), op.stream) == w->also.end()) w->also.push_back(op.stream);
    }
    w->ops.push_back(op);
  }
  return Status::ok();
}

// A lone operation whose communicator was counted as having work outstanding: inline when it
// qualifies (with `algo` when the issuing thread chose it already), else the general path.
Status runLone(const OpInfo& op, std::optional<Algo> algo) {
  Communicator* c = op.comm;
  bool ran = false;
  Status st = algo ? c->hostPath().runInlineNow(op, *algo, &ran) : c->hostPath().runInlineNow(op, &ran);
  if (ran) {
    c->work().finished();
    return st;
  }
  std::vector<CommOps> w;
  w.push_back(CommOps{c, op.stream, {op}});
  return planAndRun(w);
}

}  // namespace

Status launchInline(const OpInfo& op, Algo algo) {
  op.comm->work().started();
  if (op.stream == nullptr) return runLone(op, algo);
  op.stream->enqueue([op, algo] { return runLone(op, algo); });
  return Status::ok();
}

Status launch(std::vector<OpInfo>& ops) {
  bool anyDevice = false;
  bool anyHost = false;
  for (const auto& op : ops) (op.device ? anyDevice : anyHost) = true;
  if (anyDevice) {
    if (anyHost) {
      return invalidUsage(
          "a group mixes operations on device memory and on host memory; issue them in separate groups");
    }
    // An operation of no elements moves nothing, on either side of any pair (as in NCCL): it is
    // dropped, and a group of nothing but those enqueues nothing. A v-collective is empty only
    // where every rank's block is: a rank whose own block is empty still takes part (agreedCount).
    std::vector<OpInfo> some;
    for (const auto& op : ops) {
      if (agreedCount(op)) some.push_back(op);
    }
    if (some.empty()) return Status::ok();
    std::vector<CommOps> work;
    CHORUS_TRY(byComm(some, &work));
    return launchDevice(work);
  }
  // Per communicator, in issue order; almost always a single one, which takes `ops` whole.
  std::vector<CommOps> work;
  work.reserve(1);
  bool oneComm = true;
  for (const auto& op : ops) oneComm = oneComm && op.comm == ops.front().comm;
  if (oneComm) {
    for (const auto& op : ops) {
      if (op.stream != ops.front().stream) {
        return twoStreams(op);
      }
    }
    Communicator* c = ops.front().comm;
    const std::shared_ptr<Stream> s = ops.front().stream;
    work.push_back(CommOps{c, s, std::move(ops)});
  } else {
    CHORUS_TRY(byComm(ops, &work));
  }
  CHORUS_TRY(checkAndConnect(work));
  // Per stream, the work of every communicator on it; the NULL stream's runs last, here.
  if (work.size() == 1) {
    Communicator* c = work.front().comm;
    c->work().started();
    const std::shared_ptr<Stream> s = work.front().stream;
    if (work.front().ops.size() == 1) {
      // A lone operation: the direct fast path when it qualifies, else the general one.
      if (s == nullptr) return runLone(work.front().ops.front(), std::nullopt);
      s->enqueue([op = work.front().ops.front()] { return runLone(op, std::nullopt); });
      return Status::ok();
    }
    if (s == nullptr) return planAndRun(work);
    s->enqueue([w = std::move(work)]() mutable { return planAndRun(w); });
    return Status::ok();
  }
  std::vector<CommOps> nullWork;
  while (!work.empty()) {
    const std::shared_ptr<Stream> s = work.front().stream;
    std::vector<CommOps> mine;
    std::vector<CommOps> rest;
    for (auto& w : work) (w.stream == s ? mine : rest).push_back(std::move(w));
    work = std::move(rest);
    for (auto& w : mine) w.comm->work().started();
    if (s == nullptr) {
      nullWork = std::move(mine);
      continue;
    }
    s->enqueue([mine = std::move(mine)]() mutable { return planAndRun(mine); });
  }
  if (!nullWork.empty()) return planAndRun(nullWork);
  return Status::ok();
}

}  // namespace chorus
