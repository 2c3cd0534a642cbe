// What one kernel launch runs, as the kernel sees it: every lane of a group's operations (one
// thread block per channel, and one per point-to-point queue), the communicator's connectors and
// the state kernels keep across launches. No CUDA here: the host fills a LaunchParams and passes
// it by value as the kernel's parameter (src/device/lane_exec.h runs it), so a launch uploads
// nothing, and a CUDA graph that captured it replays it unchanged.
//
// Nothing a launch reads may change between a capture and its replays, so what does change from
// one operation to the next lives in device memory and is read and advanced by the kernel itself:
//   - positions in each FIFO are its counters: a sender's is the tail it alone writes, a
//     receiver's the head it alone writes;
//   - the sequence numbers that tag each slot (SlotTag::seq) are DeviceCommState's, one per
//     channel for collectives and one per peer and direction for point-to-point, as the host
//     path numbers them (Communicator::Sequences).
// Steps live in device memory too, uploaded once per distinct plan (the host keeps a cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/hd.h"
#include "kernels/reduce.h"
#include "src/algo/coll.h"
#include "src/algo/fifo.h"
#include "src/algo/prims.h"
#include "src/algo/schedule.h"

namespace chorus::device {

// Blocks of one launch: channels first, then point-to-point queues.
constexpr int kMaxBlocks = 64;
// Lanes of one launch; a group with more is launched in parts.
constexpr int kMaxLaunchLanes = 160;
// A connector index that names none.
constexpr uint16_t kNoConnector = 0xffff;

// One end of a FIFO in memory the kernel can reach (src/algo/fifo.h's layout).
struct DeviceConnector {
  uint32_t* tail = nullptr;
  uint32_t* head = nullptr;
  char* slots = nullptr;
  uint32_t nslots = 0;
  uint32_t slotBytes = 0;
  int32_t peer = -1;                // for error records
  uint32_t slotLines = 0;           // lines per slot of the line area (LL)
  FifoLine* lines = nullptr;        // the line area: slot i's lines at i * slotLines
  FifoLine128* lines128 = nullptr;  // the 128-byte line area (LL128): slot i's at i * slotLines128
  uint32_t slotLines128 = 0;
  uint32_t pad = 0;
};
static_assert(std::is_trivially_copyable_v<DeviceConnector> && sizeof(DeviceConnector) == 64);

// The kernel's end of a FIFO laid out in deviceFifoBytes (FifoView::layout, and the line area
// after it), to or from `peer`. FifoControl's atomics have the layout of plain 32-bit words.
inline DeviceConnector deviceConnector(const FifoView& f, int peer) {
  return DeviceConnector{reinterpret_cast<uint32_t*>(&f.ctrl->tail),
                         reinterpret_cast<uint32_t*>(&f.ctrl->head),
                         f.slots,
                         f.nslots,
                         f.slotBytes,
                         peer,
                         fifoSlotLines(f.slotBytes),
                         f.lines(),
                         f.lines128(),
                         fifoSlotLines128(f.slotBytes)};
}

// The LL protocol's slot (src/device/lane_protocols.h): kLineHeaderLines lines of header (commId, seq,
// then step and bytes), then the piece, 8 bytes a line.
constexpr uint32_t kLineHeaderLines = 3;
inline uint32_t lineSlotDataBytes(uint32_t slotBytes) { return (fifoSlotLines(slotBytes) - kLineHeaderLines) * 8; }
// The LL128 protocol's slot: one line of header (commId, seq, then step and bytes, in its first
// three words), then the piece, 120 bytes a line (word 15 of every line is its flag).
constexpr uint32_t kLine128DataBytes = 120;
inline uint32_t line128SlotDataBytes(uint32_t slotBytes) {
  return (fifoSlotLines128(slotBytes) - 1) * kLine128DataBytes;
}
// What one piece of protocol `proto` holds at most in slots of `slotBytes`.
inline uint32_t protoSlotDataBytes(ProtoKind proto, uint32_t slotBytes) {
  return proto == ProtoKind::kLL      ? lineSlotDataBytes(slotBytes)
         : proto == ProtoKind::kLL128 ? line128SlotDataBytes(slotBytes)
                                      : slotBytes;
}

// The communicator's device-resident counters (device memory), advanced by the kernels.
struct DeviceCommState {
  static constexpr int kMaxChannels = 32;
  uint64_t collSeq[kMaxChannels];  // per channel: collectives whose lane ran there
  // Per peer and point-to-point channel (nranks * kMaxP2pChannels entries, p2pSeqIndex).
  uint64_t* p2pSendSeq;
  uint64_t* p2pRecvSeq;
};
// A point-to-point lane's counter (DeviceLane::seqIndex): its peer's on its channel.
constexpr int32_t p2pSeqIndex(int peer, int channel, int nranks) { return peer + channel * nranks; }

// Why a lane stopped (DeviceError::status); 0: no error.
enum class DeviceFault : uint32_t {
  kNone = 0,
  kTimeout = 1,    // a wait lasted past the deadline with no progress
  kAborted = 2,    // the host's abort word was set
  kMismatch = 3,   // a slot's header was not this operation's piece
  kRefused = 4,    // a peer offered memory to read in place (device lanes take bytes only)
  kPeerFault = 5,  // another block of this launch failed first
};

// The first failure of a launch, written by the block that failed (mapped host memory: the
// host's watchdog reads it while the kernel runs). `status` is written last.
struct DeviceError {
  uint32_t status;  // DeviceFault
  uint32_t block;
  uint32_t lane;     // index in LaunchParams::lanes
  uint32_t step;     // of the lane's schedule
  int32_t peer;      // the peer waited for, or whose slot did not match
  uint32_t waiting;  // 1: for data, 2: for space, 3: for a one-copy peer to arrive, 4: to finish
  uint64_t seq;      // the lane's sequence number
  uint32_t bytes;    // kMismatch: what the piece should have held
  uint32_t claimed;  // 0 until a block claims the record (the first failure wins)
  int32_t seqIndex;  // the lane's channel (collectives) or peer (point-to-point)
  uint32_t seqKind;  // SeqKind
};
static_assert(std::is_trivially_copyable_v<DeviceError>);

// Where a one-copy collective's buffers are (OneCopyArgs::layout), from its descriptor's buffers
// (Collective::send and recv, src/algo/coll.h): the kernel reads the layout, not the collective.
enum OneCopyLayout : uint8_t {
  kOneCopyFromRoot = 1,  // only the root's input (a broadcast)
  kOneCopyToRoot = 2,    // only the root's output (a reduce)
  kOneCopyInBlocks = 4,  // each input holds a block per rank (a reduce-scatter)
  kOneCopyOutBlocks = 8  // each output holds a block per rank (an all-gather)
};
inline uint8_t oneCopyLayout(const Collective& c) {
  return static_cast<uint8_t>((c.send.at == BufferUse::At::kRoot ? kOneCopyFromRoot : 0) |
                              (c.recv.at == BufferUse::At::kRoot ? kOneCopyToRoot : 0) |
                              (c.send.perRank ? kOneCopyInBlocks : 0) | (c.recv.perRank ? kOneCopyOutBlocks : 0));
}

// A one-copy collective (src/device/one_copy_exec.h, OneCopy): every rank's buffers and signal area
// as this rank's kernel reaches them, in device memory (uploaded once per distinct set, so a
// captured graph keeps it). Rank r's block k (of `parts`) moves its part of rank r's share:
//   buffers of one block (all-reduce, reduce, broadcast): part r * parts + k of the message
//     (nranks * parts parts), from every input (the root's only: kOneCopyFromRoot) to every
//     output (the root's only: kOneCopyToRoot);
//   inputs of a block per rank (reduce-scatter): part k of block r, from block r of every input
//     to rank r's output;
//   outputs of a block per rank (all-gather): part k of rank r's input, to block r of every
//     output.
struct OneCopyArgs {
  static constexpr int kMaxRanks = 8;
  uint32_t nranks = 0;
  uint32_t rank = 0;
  uint32_t parts = 0;  // blocks per rank (lane.seqIndex: which)
  uint8_t layout = 0;  // OneCopyLayout
  uint8_t root = 0;    // kOneCopyFromRoot, kOneCopyToRoot
  uint16_t pad = 0;
  uint64_t count = 0;  // elements: the call's count (per block where a buffer holds a block per rank)
  const char* input[kMaxRanks] = {};
  char* output[kMaxRanks] = {};
  uint64_t* signal[kMaxRanks] = {};  // each rank's signal area (oneCopySignalBytes)
};
static_assert(std::is_trivially_copyable_v<OneCopyArgs>);

// A rank's signal area: per channel, an "arrived" and a "done" word per rank, each the sequence
// number of the last operation that rank reached there (its kernel writes them into every
// peer's area; each kernel polls its own).
constexpr size_t kOneCopySignalWords = size_t(DeviceCommState::kMaxChannels) * 2 * OneCopyArgs::kMaxRanks;
constexpr size_t oneCopySignalBytes() { return kOneCopySignalWords * sizeof(uint64_t); }
CHORUS_HD uint64_t* oneCopyWord(uint64_t* area, int channel, int done, int rank) {
  return area + (size_t(channel) * 2 + done) * OneCopyArgs::kMaxRanks + rank;
}

// Which counter of DeviceCommState tags a lane's slots.
enum class SeqKind : uint8_t { kColl, kP2pSend, kP2pRecv };

// One lane: a schedule run by one block over connectors of the communicator's table.
struct DeviceLane {
  const Step* steps = nullptr;  // device memory; null: the one step is `step` (point-to-point)
  uint32_t nsteps = 0;
  uint8_t type = 0;  // chorusDataType_t
  SeqKind seqKind = SeqKind::kColl;
  ProtoKind proto = ProtoKind::kSimple;  // kLL, kLL128: pieces as lines; otherwise the slots (kFlag as kSimple)
  uint8_t pad = 0;
  int32_t seqIndex = 0;    // channel (kColl) or p2pSeqIndex (peer and channel)
  uint32_t slotBytes = 0;  // what one piece holds at most (protoSlotDataBytes of the slots')
  const char* input = nullptr;
  char* output = nullptr;
  char* scratch = nullptr;  // one slot of device memory, for schedules that stash a piece
  ReduceSpec spec;
  uint16_t send[kMaxLanePeers] = {kNoConnector, kNoConnector, kNoConnector, kNoConnector,
                                  kNoConnector, kNoConnector, kNoConnector};
  uint16_t recv[kMaxLanePeers] = {kNoConnector, kNoConnector, kNoConnector, kNoConnector,
                                  kNoConnector, kNoConnector, kNoConnector};
  Step step = {};                        // a lane of one step carries it here: nothing to upload
  const OneCopyArgs* oneCopy = nullptr;  // set: a one-copy collective's part, not a schedule
};
static_assert(std::is_trivially_copyable_v<DeviceLane>);

// A launch: block b runs lanes [laneBegin[b], laneBegin[b + 1]) in order.
struct LaunchParams {
  const DeviceConnector* connectors = nullptr;  // the communicator's table (device memory)
  DeviceCommState* state = nullptr;             // device memory
  DeviceError* error = nullptr;                 // mapped host memory
  const uint32_t* abortFlag = nullptr;          // mapped host memory: nonzero stops every wait
  uint64_t commId = 0;
  uint64_t timeoutNs = 0;  // a wait without progress this long fails
  uint32_t nblocks = 0;
  uint16_t laneBegin[kMaxBlocks + 1] = {};
  DeviceLane lanes[kMaxLaunchLanes];
};
static_assert(std::is_trivially_copyable_v<LaunchParams>);
static_assert(std::is_standard_layout_v<LaunchParams>, "launchParamsBytes takes offsetof");
// CUDA 12.1 and later take up to 32764 bytes of kernel parameters on every architecture built.
static_assert(sizeof(LaunchParams) <= 32764, "a launch's lanes must fit the kernel's parameters");

// What every launch of a communicator holds beside its blocks and lanes: what LaunchPacker starts
// each launch from, without building (27 KB) or copying a whole LaunchParams for it.
struct LaunchHeader {
  const DeviceConnector* connectors = nullptr;
  DeviceCommState* state = nullptr;
  DeviceError* error = nullptr;
  const uint32_t* abortFlag = nullptr;
  uint64_t commId = 0;
  uint64_t timeoutNs = 0;

  static LaunchHeader of(const LaunchParams& p) {
    return LaunchHeader{p.connectors, p.state, p.error, p.abortFlag, p.commId, p.timeoutNs};
  }
  void applyTo(LaunchParams& p) const {
    p.connectors = connectors;
    p.state = state;
    p.error = error;
    p.abortFlag = abortFlag;
    p.commId = commId;
    p.timeoutNs = timeoutNs;
  }
};

// The bytes of `p` its kernel reads: everything before the lanes, and the lanes its blocks run
// (lanes [0, laneBegin[nblocks])), rounded up to 16. A launch passes only these to the driver
// (cuLaunchKernel's CU_LAUNCH_PARAM_BUFFER_SIZE, as NCCL passes the used part of its 4 KB
// argument struct): every parameter byte is copied into each launch, and the whole struct is
// 27 KB where a one-lane launch reads 352.
inline size_t launchParamsBytes(const LaunchParams& p) {
  const size_t lanes = p.nblocks ? p.laneBegin[p.nblocks < kMaxBlocks ? p.nblocks : kMaxBlocks] : 0;
  const size_t used =
      offsetof(LaunchParams, lanes) + (lanes < kMaxLaunchLanes ? lanes : kMaxLaunchLanes) * sizeof(DeviceLane);
  const size_t rounded = (used + 15) / 16 * 16;
  return rounded < sizeof(LaunchParams) ? rounded : sizeof(LaunchParams);
}

}  // namespace chorus::device
