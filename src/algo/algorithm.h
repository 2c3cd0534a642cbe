// Algorithms as units. Each algorithm says which collectives it runs, on which memory, what a
// call costs (its estimate over the tuning table, src/algo/cost.h), which connections it needs
// and how it plans one call into lanes; the registry (algorithm.cc) lists them in a fixed order
// that every rank shares, and the tuner (tuner.h) picks the least estimate per call. Adding an
// algorithm is a file that defines its Algorithm and one line in the registry (and, for the tuner
// to pick it unforced, its rows in the tuning table): the core builds whatever lanes a plan names
// over whatever connections it asks for, and the tuner compares estimates, without knowing which
// algorithm is which.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/algo/coll.h"
#include "src/algo/connections.h"
#include "src/algo/cost.h"
#include "src/algo/prims.h"
#include "src/algo/schedule.h"
#include "src/common/status.h"

namespace chorus {

// An algorithm: its index in the registry. The built-in ones the tuner chooses come first.
enum class Algo : unsigned char { kRing = 0, kDirect = 1, kTree = 2, kSlice = 3, kOneCopy = 4 };
// The algorithm that runs every collective on channels (the ring): what a call runs until the tuner
// chooses another.
constexpr Algo kDefaultAlgo = Algo::kRing;
// An algorithm as one bit of a set (which algorithms' connections exist, or are needed).
constexpr uint32_t algoBit(Algo a) { return 1u << static_cast<unsigned>(a); }

// What every rank knows alike about its communicator, for planning.
struct AlgoContext {
  int rank = 0;
  int nranks = 1;
  int nChannels = 1;
  const std::vector<std::vector<int>>* rings = nullptr;  // (*rings)[c][position]: the rank there
  const std::vector<int>* ringPos = nullptr;             // this rank's position on each ring
  const std::vector<int>* treeParent[2] = {};            // (*treeParent[t])[rank]: its parent, or -1
  size_t slotBytes = 0;                                  // ring FIFOs' slot payload
  size_t peerSlotBytes = 0;                              // per-peer FIFOs' slot payload
  int slots = 0;                                         // slots per FIFO

  int ringNext(int c) const { return (*rings)[c][((*ringPos)[c] + 1) % nranks]; }
  int ringPrev(int c) const { return (*rings)[c][((*ringPos)[c] - 1 + nranks) % nranks]; }
  std::vector<int> treeChildren(int t) const;
};

// One call, as an algorithm plans it.
struct AlgoCall {
  CollType coll = CollType::kAllReduce;
  size_t count = 0;
  size_t elemSize = 1;
  int root = 0;
  bool inPlace = false;                 // the output is the input
  const BlockLayout* blocks = nullptr;  // a v-collective's blocks (count: this rank's own)
  // This rank chose the algorithm on its own (its buffers are registered: the slice all-reduce)
  // and its ring neighbours may have chosen the ring: the plan greets them over the first ring's
  // connections, which every rank keeps for that case, so a disagreement fails at once.
  bool chosenAlone = false;
};

// A call as a rank describes it to every peer at enqueue, for an algorithm taken where the ranks
// agree (Algorithm::Taken::kIfAgreed): the device path sends it with what only the core knows
// (where the buffers lie, which GPU: src/core/onecopy.h) and runs the algorithm where
// Algorithm::agreed holds for every rank's and every rank's GPU reaches every other's.
struct AgreedCall {
  uint32_t offers = 0;  // 1: this rank's buffers may be read and written in place by its peers
  uint32_t coll = 0;    // CollType
  uint32_t root = 0;
  uint32_t type = 0;
  uint64_t count = 0;
  // The reduction as this rank resolved it (ReduceSpec's kind, pre-multiplication, division).
  uint32_t redKind = 0;
  uint32_t hasPre = 0;
  uint32_t hasPostDiv = 0;
  uint32_t reserved = 0;
  double scaleF = 1.0;
  uint64_t scaleI = 1;
  uint64_t divisor = 1;
};

// A connection a lane uses, by its place in the connection table; index -1: none.
struct ConnRef {
  ConnFamily family = ConnFamily::kRing;
  int index = -1;
};

// One lane of a plan: a schedule the primitives run over up to kMaxLanePeers connectors each way
// (a step's sendTo and recvFrom index send[] and recv[]), with protocol `proto`.
struct LanePlan {
  std::vector<Step> steps;
  ConnRef send[kMaxLanePeers];
  ConnRef recv[kMaxLanePeers];
  int channel = 0;       // whose status record the lane keeps
  size_t slotBytes = 0;  // its connections' slot payload
  ProtoKind proto = ProtoKind::kSimple;
  bool scratch = false;  // its steps stash pieces (a slot of scratch)
  // Its sends may leave from the user's buffer by reference and its receives land there (socket
  // zero-copy); off for schedules with control slots (kSendDesc, kSignal), which that bookkeeping
  // does not count.
  bool byReference = true;
  // A block of a one-copy collective (device memory): no steps and no connectors; its kernel
  // reads and writes the peers' buffers, which the launch names (device::OneCopyArgs).
  bool oneCopy = false;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // Lower case, as CHORUS_ALGO names it.
  virtual const char* name() const = 0;
  // Whether it can run `coll` (CHORUS_ALGO applies to all-reduces; the others always take the ring).
  virtual bool runs(CollType coll) const = 0;
  // Whether it runs on buffers of this memory kind (device: as kernels' lanes).
  virtual bool runsOn(MemKind mem) const { return mem == MemKind::kHost || mem == MemKind::kDevice; }
  // Its estimated time for the call `q` describes (runs(q.coll) holds; q.row is its table row):
  // its schedule's shape through costUs, or kNever where it must not run the call.
  virtual double estimateUs(const CostQuery& q) const = 0;
  // The most ranks it can run (a lane over every peer has kMaxLanePeers connectors each way).
  virtual int maxRanks() const { return 1 << 30; }
  // A lone host call of it may run on the calling thread, with no task, queue or latch
  // (Communicator::runInlineNow): its plan is one lane, short enough that handing it to the
  // engine costs more than it. The inline path takes any such algorithm; it names none.
  virtual bool runsInline() const { return false; }
  // The connections this rank needs to run it: appended to *out, both ends this rank holds.
  virtual void connections(const AlgoContext& ctx, std::vector<ConnKey>* out) const = 0;
  // The lanes of one call, appended to *lanes (runs(call.coll) holds).
  virtual void plan(const AlgoContext& ctx, const AlgoCall& call, std::vector<LanePlan>* lanes) const = 0;

  // How a call comes to run it (the tuner, Tuner::Choice):
  //   kChosen    the tuner chooses it where its estimate is the least, and only then;
  //   kAlone     its estimate assumes what only each rank knows (its buffers are registered):
  //              where it is least between processes, the best of the rest runs, and where that
  //              is aloneBeside() a registered rank takes this one on its own instead (its
  //              neighbours check that they agree); both algorithms' connections are made;
  //   kIfAgreed  it runs where every rank's records agree at enqueue (the device path's
  //              exchange), offered beside the choice where its estimate is the least; it needs
  //              no connections of its own. Forcing it (CHORUS_ALGO) offers it on every call.
  enum class Taken : uint8_t { kChosen, kAlone, kIfAgreed };
  virtual Taken taken() const { return Taken::kChosen; }
  // kAlone: the choice beside which a rank may take it on its own (the connections that carry
  // its first slot to its neighbours).
  virtual std::optional<Algo> aloneBeside() const { return std::nullopt; }
  // kIfAgreed: its agreement at enqueue, which the device path runs for it: whether the call as
  // every rank described it (`all`, in rank order) lets it run on every rank. The core adds that
  // every rank's GPU reaches every other's.
  virtual bool agreed(const std::vector<AgreedCall>& all) const {
    (void)all;
    return false;
  }
};

// Both ends of the per-peer connection of family `f` with `peer` (per-peer families are indexed
// by rank), and the same with every other rank.
inline void connectPeer(ConnFamily f, int peer, std::vector<ConnKey>* out) {
  out->push_back(ConnKey{f, peer, peer, true});
  out->push_back(ConnKey{f, peer, peer, false});
}
inline void connectEveryPeer(const AlgoContext& ctx, ConnFamily f, std::vector<ConnKey>* out) {
  for (int p = 0; p < ctx.nranks; ++p) {
    if (p != ctx.rank) connectPeer(f, p, out);
  }
}

// The one-copy collectives' bounds (one_copy.cc): the ranks its kernel's arguments name, and its
// blocks per rank, one per 256 KiB of each rank's share, 1 to kOneCopyMaxParts. `bytes` is the
// call's count in bytes: an all-reduce's, reduce's or broadcast's message (a rank's share is 1/n
// of it), an all-gather's input or a reduce-scatter's output (a rank's share is all of it). The
// two-argument form is the all-reduce's.
constexpr int kOneCopyMaxRanks = 8;  // device::OneCopyArgs::kMaxRanks
constexpr uint32_t kOneCopyMaxParts = 16;
uint32_t oneCopyParts(CollType coll, size_t bytes, int nranks);
inline uint32_t oneCopyParts(size_t bytes, int nranks) { return oneCopyParts(CollType::kAllReduce, bytes, nranks); }

// The registry.
int algorithmCount();
const Algorithm& algorithm(Algo a);
const char* algoName(Algo a);
// CHORUS_ALGO, parsed once: empty means "chosen per call"; a name the registry lacks, or one that
// cannot run an all-reduce, is an error that lists the ones this build has.
Result<std::optional<Algo>> parseAlgoSetting(const std::string& value);

}  // namespace chorus
