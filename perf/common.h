// The shared harness of the perf tools, after nccl-tests: the same flags, the same table, the
// same bus-bandwidth factors, so numbers compare directly.
#pragma once

#include <cstddef>
#include <string>

#include "include/chorus/chorus.h"

namespace chorus::perf {

// One collective's description: what it moves and how nccl-tests scales its bandwidth.
struct CollDesc {
  const char* name;
  bool reduces;
  bool rooted;
  // Elements of the send and receive buffers for `count` elements per rank of output at n ranks.
  size_t (*sendElems)(size_t count, int n);
  size_t (*recvElems)(size_t count, int n);
  // nccl-tests' busbw = algbw * factor.
  double (*busFactor)(int n);
  // Launches one operation.
  chorusResult_t (*run)(const void* send, void* recv, size_t count, chorusDataType_t type, chorusRedOp_t op, int root,
                        chorusComm_t comm, chorusStream_t stream);
  // Element i of the result at `rank` for inputs fill(r, j), or false when rank holds no result.
  bool (*expect)(int rank, int n, int root, size_t count, size_t i, double (*fill)(int r, size_t j), double* out);
};

const CollDesc& allReduceDesc();

// Parses the command line, runs the sweep on this process's ranks and prints the table.
int runPerf(const CollDesc& desc, int argc, char** argv);

}  // namespace chorus::perf
