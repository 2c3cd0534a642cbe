// Group semantics and launching.
//
// Group state is per thread (chorusGroupStart/End nest). Outside a group every call is a group of
// one. At the outermost chorusGroupEnd the recorded communicator inits run (concurrently), and the
// recorded operations are checked and connected on the calling thread, then handed, per stream,
// to one work item that plans and runs the tasks of every communicator on that stream at once, so
// one thread can drive several ranks of one clique; on the NULL stream the group completes before
// chorusGroupEnd returns. A lone small all-reduce takes a fast path with no task at all.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "src/core/comm.h"

namespace chorus {

struct InitJob {
  std::shared_ptr<CommHandle> handle;
  BootstrapId id;
  int rank;
  int nranks;
  CommOptions options;
  // Set for a split (or another communicator made from a parent): makes the communicator in place
  // of Communicator::create from the fields above.
  std::function<Result<std::unique_ptr<Communicator>>()> make;
};

bool inGroup();
void groupStart();
// Ends one level; at the outermost level runs what was recorded.
Status groupEnd();
// Ends one level as groupEnd, but at the outermost level runs nothing: the recorded operations'
// estimated time (microseconds: each communicator's one after another, the slowest's), and they
// are dropped.
Result<double> groupSimulateEnd();
// Records an op (inside a group) or launches it at once (outside).
Status submitOp(const OpInfo& op);
// Records an init or a split (inside a group), run at the outermost groupEnd with the group's
// other inits at once; returns false when not in a group.
bool deferInit(const InitJob& job);
// Records a failure of a call inside the group: the group then launches nothing.
void groupFail(const Status& s);

// Runs one init into its handle (used directly and by groupEnd).
Status runInit(const InitJob& job);
// Launches ops now (a group's worth).
Status launch(std::vector<OpInfo>& ops);
// Launches a lone host collective that HostPath::loneInlineAlgo gave `algo`, with no
// grouping or connection checks: on the calling thread (the NULL stream) or the stream's worker.
Status launchInline(const OpInfo& op, Algo algo);

}  // namespace chorus
