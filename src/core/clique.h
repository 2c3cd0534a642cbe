// Cliques made inside one process: a private bootstrap root (never CHORUS_COMM_ID, which names
// a clique spanning processes), and chorusCommInitAll's ranks as threads.
#pragma once

#include <memory>
#include <vector>

#include "src/bootstrap/bootstrap.h"
#include "src/common/config.h"
#include "src/core/comm.h"

namespace chorus {

// A bootstrap id whose root runs in this process; `stop` ends that root early.
Result<BootstrapId> makePrivateBootstrapId(const Config& cfg, std::shared_ptr<const std::atomic<bool>> stop = nullptr);

// `n` ranks of a new clique, each initialised on a thread of its own into handles[r]. The first
// rank to fail stops the others' init and the clique's root (which would otherwise wait out the
// timeout), and its error is the one returned: the others' are echoes of it.
Status initClique(std::vector<std::shared_ptr<CommHandle>>* handles, int n, const int* devlist);

}  // namespace chorus
