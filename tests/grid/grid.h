// The correctness grid: every collective x type x op x in/out-of-place x count x root, each
// result checked element by element against a reference computed here from the same
// deterministic inputs, with guard bytes around every buffer. Shared by the thread-per-rank test
// (grid_test.cc) and the multi-process runner (grid_proc.cc).
//
// Inputs are small integers (or ±1/2 for products) chosen so that every partial sum or product
// is exact in the type, whatever the order: the reference is then exact, and results are compared
// bitwise. Float avg, whose 1/n scaling rounds, is compared within a tolerance, and every rank's
// result is checked to be bitwise identical across ranks by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "include/chorus/chorus.h"

namespace chorus::test {

enum class Coll {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kSendRecv,
  // Blocks of a count per rank (vCounts), packed in rank order; host grids only so far.
  kAllGatherV,
  kReduceScatterV
};
const char* collName(Coll c);
// A v-collective's counts in the grid for `count`: rank r's block is count + r elements, every
// third rank's (r % 3 == 1) none.
std::vector<size_t> vCounts(size_t count, int n);

// kPreMulSum is chorusRedOpCreatePreMulSum with a scalar of 2 (3 for integers); kBand, kBor and
// kBxor (chorusBand, chorusBor, chorusBxor) run on the integer types only.
enum class Op { kSum, kProd, kMax, kMin, kAvg, kPreMulSum, kBand, kBor, kBxor, kNone };
const char* opName(Op o);

struct Case {
  Coll coll;
  chorusDataType_t type;
  Op op;
  size_t count;
  int root;
  bool inPlace;
  size_t misalign;  // bytes added to every buffer's address
  std::string describe() const;
};

struct GridOptions {
  bool full = true;                     // every type and op; otherwise a pairwise subset
  bool large = true;                    // include several-MiB counts
  std::vector<Coll> colls;              // empty: all
  std::vector<chorusDataType_t> types;  // empty: all
};

// Every rank builds the same list, in the same order.
std::vector<Case> makeGrid(int nranks, const GridOptions& opts);

struct CaseResult {
  bool ok = true;
  std::string error;        // first mismatch, with index, got and expected
  uint64_t resultHash = 0;  // of the bytes every rank should agree on (0 when ranks differ by design)
};

// Runs one case on this rank's communicator (NULL stream unless `stream`) and checks it.
CaseResult runCase(chorusComm_t comm, const Case& c, chorusStream_t stream = nullptr);

}  // namespace chorus::test
