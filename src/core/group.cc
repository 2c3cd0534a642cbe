#include "src/core/group.h"

#include <map>
#include <thread>

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
  std::vector<OpInfo> ops{op};
  return launch(ops);
}

Status runInit(const InitJob& job) {
  chorusComm* h = job.handle;
  auto r = Communicator::create(job.id, job.rank, job.nranks, job.options, nullptr);
  Status s = r.status();
  std::lock_guard<std::mutex> g(h->initMu);
  if (r.isOk()) h->impl = r.take();
  h->initStatus = s;
  h->initDone.store(true, std::memory_order_release);
  return s;
}

Status groupEnd() {
  if (tGroup.depth == 0) {
    return invalidUsage("chorusGroupEnd without a matching chorusGroupStart on this thread");
  }
  if (--tGroup.depth > 0) return Status::ok();
  GroupState g = std::move(tGroup);
  tGroup = GroupState();
  if (!g.error.isOk()) {
    Status s =
        invalidUsage("a call inside this group failed, so nothing in the group was launched: " + g.error.message());
    // Handles of inits recorded in the group exist; they must not look "in progress" forever.
    for (const auto& job : g.inits) {
      std::lock_guard<std::mutex> lk(job.handle->initMu);
      job.handle->initStatus = s;
      job.handle->initDone.store(true, std::memory_order_release);
    }
    return s;
  }
  if (!g.inits.empty()) {
    if (!g.ops.empty()) {
      return invalidUsage("a group may hold communicator inits or operations, not both (as in NCCL)");
    }
    // Every init of the group runs at once: ranks of one clique driven by one thread must all
    // join the bootstrap together. Non-blocking handles keep running in the background.
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
    for (const auto& s : results) {
      if (!s.isOk()) return s;
    }
    return Status::ok();
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
bool runInline(std::vector<std::unique_ptr<Task>>& tasks) {
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
  const IdlePolicy policy(static_cast<Communicator*>(tasks[0]->owner())->config());
  std::vector<char> done(tasks.size(), 0);
  size_t left = tasks.size();
  for (auto& t : tasks) t->lastProgressNs = nowNs();
  int64_t idleSince = 0;
  int yields = 0;
  while (left > 0) {
    const int64_t now = nowNs();
    bool movedAny = false;
    WaitInfo first;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (done[i]) continue;
      WaitInfo w;
      bool moved = false;
      Status s = tasks[i]->advance(now, &w, &moved);
      movedAny = movedAny || moved;
      if (s.inProgress()) {
        if (!first.word) first = w;
        continue;
      }
      tasks[i]->finish(s);
      done[i] = 1;
      --left;
      movedAny = true;
    }
    if (movedAny || left == 0) {
      idleSince = 0;
      yields = 0;
      continue;
    }
    if (idleSince == 0) idleSince = now;
    policy.step(first, now - idleSince, &yields);
  }
  return true;
}

void submitToEngines(std::vector<std::unique_ptr<Task>>& tasks) {
  for (auto& t : tasks) {
    auto* c = static_cast<Communicator*>(t->owner());
    c->engine().submit(std::move(t));
  }
}

}  // namespace

Status launch(std::vector<OpInfo>& ops) {
  // Per communicator, in issue order.
  std::vector<Communicator*> comms;
  std::map<Communicator*, std::vector<OpInfo>> byComm;
  std::map<Communicator*, chorusStream_t> streamOf;
  for (const auto& op : ops) {
    auto [it, fresh] = byComm.try_emplace(op.comm);
    if (fresh) {
      comms.push_back(op.comm);
      streamOf[op.comm] = op.stream;
    } else if (streamOf[op.comm] != op.stream) {
      return invalidUsage("operations of one communicator in one group must use one stream (rank " +
                          std::to_string(op.comm->rank()) + " used two)");
    }
    it->second.push_back(op);
  }
  std::vector<std::pair<Communicator*, std::vector<Communicator::ConnNeed>>> work;
  for (Communicator* c : comms) {
    auto needs = c->connectionsNeeded(byComm[c]);
    if (!needs.empty()) work.emplace_back(c, std::move(needs));
  }
  if (!work.empty()) {
    Status s = Communicator::connect(work);
    if (!s.isOk()) {
      for (auto& w : work) w.first->setAsyncError(s);
      return s;
    }
  }
  // Per stream, the tasks of every communicator on it.
  std::map<chorusStream_t, std::vector<std::unique_ptr<Task>>> byStream;
  std::vector<chorusStream_t> streams;
  for (Communicator* c : comms) {
    CHORUS_ASSIGN_OR_RETURN(auto task, c->plan(byComm[c]));
    chorusStream_t s = streamOf[c];
    if (!byStream.count(s)) streams.push_back(s);
    byStream[s].push_back(std::move(task));
  }
  std::shared_ptr<LaunchLatch> nullLatch;
  std::shared_ptr<std::vector<std::unique_ptr<Task>>> nullTasks;
  for (chorusStream_t s : streams) {
    auto tasks = std::make_shared<std::vector<std::unique_ptr<Task>>>(std::move(byStream[s]));
    auto latch = std::make_shared<LaunchLatch>(static_cast<int>(tasks->size()));
    for (auto& t : *tasks) {
      auto* c = static_cast<Communicator*>(t->owner());
      c->taskStarted();
      t->setOnDone([c, latch](const Status& st) {
        latch->done(st);
        c->taskFinished();
      });
    }
    auto run = [tasks, latch]() -> Status {
      if (!runInline(*tasks)) submitToEngines(*tasks);
      return latch->wait();
    };
    if (s == nullptr) {
      // Other streams' launches go first to the engines, so the NULL stream's inline run below
      // does not hold up the ranks that wait on them.
      nullTasks = tasks;
      nullLatch = latch;
    } else {
      s->impl->enqueue(run);
    }
  }
  if (nullLatch) {
    if (!runInline(*nullTasks)) submitToEngines(*nullTasks);
    return nullLatch->wait();
  }
  return Status::ok();
}

}  // namespace chorus
