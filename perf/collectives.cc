// What each perf tool measures: buffer sizes, the call, nccl-tests' bus-bandwidth factor, and
// where each received element comes from (for -c).
#include <vector>

#include "perf/common.h"

namespace chorus::perf {
namespace {

size_t whole(size_t c, int) { return c; }
size_t perRank(size_t c, int n) { return c / static_cast<size_t>(n); }
size_t roundNone(size_t c, int) { return c; }
size_t roundToRanks(size_t c, int n) { return c - c % static_cast<size_t>(n); }
double one(int) { return 1.0; }
double ringFactor(int n) { return n > 1 ? double(n - 1) / n : 0.0; }
double allReduceFactor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

bool fromAllReduced(int, int, int, size_t, size_t i, int* src, size_t* elem, bool* reduced) {
  *src = 0;
  *elem = i;
  *reduced = true;
  return true;
}
bool fromRootReduced(int rank, int, int root, size_t, size_t i, int* src, size_t* elem, bool* reduced) {
  *src = 0;
  *elem = i;
  *reduced = true;
  return rank == root;
}
bool fromRoot(int, int, int root, size_t, size_t i, int* src, size_t* elem, bool* reduced) {
  *src = root;
  *elem = i;
  *reduced = false;
  return true;
}
bool gathered(int, int n, int, size_t count, size_t i, int* src, size_t* elem, bool* reduced) {
  const size_t per = count / n;
  *src = static_cast<int>(i / per);
  *elem = i % per;
  *reduced = false;
  return true;
}
bool gatheredAtRoot(int rank, int n, int root, size_t count, size_t i, int* src, size_t* elem, bool* reduced) {
  return gathered(rank, n, root, count, i, src, elem, reduced) && rank == root;
}
bool scatteredReduced(int rank, int n, int, size_t count, size_t i, int* src, size_t* elem, bool* reduced) {
  *src = 0;
  *elem = size_t(rank) * (count / n) + i;
  *reduced = true;
  return true;
}
bool scatteredFromRoot(int rank, int n, int root, size_t count, size_t i, int* src, size_t* elem, bool* reduced) {
  *src = root;
  *elem = size_t(rank) * (count / n) + i;
  *reduced = false;
  return true;
}
bool exchanged(int rank, int n, int, size_t count, size_t i, int* src, size_t* elem, bool* reduced) {
  const size_t per = count / n;
  *src = static_cast<int>(i / per);
  *elem = size_t(rank) * per + i % per;
  *reduced = false;
  return true;
}
bool fromPrevious(int rank, int n, int, size_t, size_t i, int* src, size_t* elem, bool* reduced) {
  *src = (rank - 1 + n) % n;
  *elem = i;
  *reduced = false;
  return true;
}

// The v-collectives' blocks for a call of `per` elements per rank: uneven, rank r's
// 2 (r + 1) / (n + 1) x per elements (rising with the rank, at most n x per in all), packed in
// rank order. Filled into `counts`, which a timed call reuses (no allocation in the loop).
void vCounts(size_t per, int n, std::vector<size_t>* counts) {
  counts->resize(n);
  for (int r = 0; r < n; ++r) (*counts)[r] = per * 2 * static_cast<size_t>(r + 1) / static_cast<size_t>(n + 1);
}
// Where block r of the buffer of blocks begins.
size_t vDispl(const std::vector<size_t>& counts, int r) {
  size_t at = 0;
  for (int q = 0; q < r; ++q) at += counts[q];
  return at;
}
bool gatheredV(int, int n, int, size_t count, size_t i, int* src, size_t* elem, bool* reduced) {
  thread_local std::vector<size_t> counts;
  vCounts(count / n, n, &counts);
  *reduced = false;
  size_t begin = 0;
  for (int r = 0; r < n; ++r) {
    if (i < begin + counts[r]) {
      *src = r;
      *elem = i - begin;
      return true;
    }
    begin += counts[r];
  }
  return false;  // past the last block
}
bool scatteredReducedV(int rank, int n, int, size_t count, size_t i, int* src, size_t* elem, bool* reduced) {
  thread_local std::vector<size_t> counts;
  vCounts(count / n, n, &counts);
  if (i >= counts[rank]) return false;
  *src = 0;
  *elem = vDispl(counts, rank) + i;
  *reduced = true;
  return true;
}
int rankOf(chorusComm_t comm, int* n) {
  int rank = 0;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, n);
  return rank;
}

chorusResult_t runAllReduce(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t op, int,
                            chorusComm_t comm, chorusStream_t st) {
  return chorusAllReduce(s, r, c, t, op, comm, st);
}
chorusResult_t runAllGather(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t, int, chorusComm_t comm,
                            chorusStream_t st) {
  return chorusAllGather(s, r, c, t, comm, st);
}
chorusResult_t runBroadcast(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t, int root,
                            chorusComm_t comm, chorusStream_t st) {
  return chorusBroadcast(s, r, c, t, root, comm, st);
}
chorusResult_t runReduce(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t op, int root,
                         chorusComm_t comm, chorusStream_t st) {
  return chorusReduce(s, r, c, t, op, root, comm, st);
}
chorusResult_t runReduceScatter(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t op, int,
                                chorusComm_t comm, chorusStream_t st) {
  return chorusReduceScatter(s, r, c, t, op, comm, st);
}
chorusResult_t runAlltoAll(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t, int, chorusComm_t comm,
                           chorusStream_t st) {
  return chorusAlltoAll(s, r, c, t, comm, st);
}
chorusResult_t runGather(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t, int root,
                         chorusComm_t comm, chorusStream_t st) {
  return chorusGather(s, r, c, t, root, comm, st);
}
chorusResult_t runScatter(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t, int root,
                          chorusComm_t comm, chorusStream_t st) {
  return chorusScatter(s, r, c, t, root, comm, st);
}
chorusResult_t runAllGatherV(const void* s, void* r, size_t per, chorusDataType_t t, chorusRedOp_t, int,
                             chorusComm_t comm, chorusStream_t st) {
  int n = 1;
  const int rank = rankOf(comm, &n);
  thread_local std::vector<size_t> counts;
  vCounts(per, n, &counts);
  return chorusAllGatherV(s, counts[rank], r, counts.data(), nullptr, t, comm, st);
}
chorusResult_t runReduceScatterV(const void* s, void* r, size_t per, chorusDataType_t t, chorusRedOp_t op, int,
                                 chorusComm_t comm, chorusStream_t st) {
  int n = 1;
  const int rank = rankOf(comm, &n);
  thread_local std::vector<size_t> counts;
  vCounts(per, n, &counts);
  return chorusReduceScatterV(s, counts.data(), nullptr, r, counts[rank], t, op, comm, st);
}
chorusResult_t runSendRecv(const void* s, void* r, size_t c, chorusDataType_t t, chorusRedOp_t, int, chorusComm_t comm,
                           chorusStream_t st) {
  int rank = 0;
  int n = 1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  chorusGroupStart();
  chorusSend(s, c, t, (rank + 1) % n, comm, st);
  chorusRecv(r, c, t, (rank - 1 + n) % n, comm, st);
  return chorusGroupEnd();
}

}  // namespace

const CollDesc& allReduceDesc() {
  static const CollDesc d{"AllReduce", true,      false,           InPlace::kSame, whole,         whole,
                          whole,       roundNone, allReduceFactor, runAllReduce,   fromAllReduced};
  return d;
}
const CollDesc& allGatherDesc() {
  static const CollDesc d{"AllGather", false,        false,   InPlace::kSendInRecvBlock,
                          perRank,     whole,        perRank, roundToRanks,
                          ringFactor,  runAllGather, gathered};
  return d;
}
// The v-collectives on blocks of uneven sizes (vCounts), the same bytes in all as all_gather_perf
// and reduce_scatter_perf move; no in-place form (a rank's block is not at rank x count).
const CollDesc& allGatherVDesc() {
  // A rank's block is up to 2n/(n+1) x the even share: its input is sized as the whole.
  static const CollDesc d{"AllGatherV", false,        false,      InPlace::kNone, whole,    whole,
                          perRank,      roundToRanks, ringFactor, runAllGatherV,  gatheredV};
  return d;
}
const CollDesc& reduceScatterVDesc() {
  static const CollDesc d{
      "ReduceScatterV", true, false, InPlace::kNone, whole, whole, perRank, roundToRanks, ringFactor, runReduceScatterV,
      scatteredReducedV};
  return d;
}
const CollDesc& broadcastDesc() {
  static const CollDesc d{"Broadcast", false,     true, InPlace::kSame, whole,   whole,
                          whole,       roundNone, one,  runBroadcast,   fromRoot};
  return d;
}
const CollDesc& reduceDesc() {
  static const CollDesc d{"Reduce", true,      true, InPlace::kSame, whole,          whole,
                          whole,    roundNone, one,  runReduce,      fromRootReduced};
  return d;
}
const CollDesc& reduceScatterDesc() {
  static const CollDesc d{
      "ReduceScatter", true,         false,      InPlace::kRecvInSendBlock, whole,           perRank,
      perRank,         roundToRanks, ringFactor, runReduceScatter,          scatteredReduced};
  return d;
}
const CollDesc& alltoAllDesc() {
  static const CollDesc d{"AlltoAll", false,        false,      InPlace::kNone, whole,    whole,
                          perRank,    roundToRanks, ringFactor, runAlltoAll,    exchanged};
  return d;
}
const CollDesc& sendRecvDesc() {
  static const CollDesc d{"SendRecv", false,     false, InPlace::kNone, whole,       whole,
                          whole,      roundNone, one,   runSendRecv,    fromPrevious};
  return d;
}
const CollDesc& gatherDesc() {
  static const CollDesc d{"Gather",   false,     true,          InPlace::kSendInRecvBlock,
                          perRank,    whole,     perRank,       roundToRanks,
                          ringFactor, runGather, gatheredAtRoot};
  return d;
}
const CollDesc& scatterDesc() {
  static const CollDesc d{"Scatter",    false,      true,       InPlace::kRecvInSendBlock, whole, perRank, perRank,
                          roundToRanks, ringFactor, runScatter, scatteredFromRoot};
  return d;
}

}  // namespace chorus::perf
