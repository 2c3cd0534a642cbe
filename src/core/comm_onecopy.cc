// The one-copy collectives' host side (docs/records/2026-11-28-gpu-one-copy.md): which device
// collectives take it, the records ranks exchange for each, the peers' memory mapped here, and
// the arguments the kernel gets (src/device/one_copy_exec.h, OneCopy).
//
// A device collective on channels is a candidate on every rank alike where the tuner offers the
// one-copy algorithm (src/algo/one_copy.cc: 2 to 8 ranks, all on one host; by its tuning-table
// row, or everywhere under CHORUS_ONECOPY=1): each rank then sends every peer a record (its GPU,
// whether it offers its buffers, where they and its signal area lie) and receives theirs, every
// communicator of the launch sending before any receives. It runs one-copy when the algorithm
// agrees (Algorithm::agreed: every rank offers and issued the same call) and every rank's GPU
// reaches every other's; otherwise as any device collective, so the ranks always decide alike. A
// rank offers when the buffers the kernel touches (a broadcast's input and a reduce's output on the
// root only) are on its GPU and, if any peer is another process, lie in chorusCommRegister'ed
// ranges of chorusCudaMemAlloc (cuMem) allocations. The first record that names one of this rank's
// allocations offers its POSIX descriptor to every peer in another process (the descriptor server,
// token + the peer's rank); those peers import and map it once, for the communicator's life (mapped
// memory outlives a free by its owner; docs say so).
#include <algorithm>
#include <cstring>

#include "src/core/comm.h"
#include "src/core/onecopy.h"
#include "src/device/cuda.h"

namespace chorus {

bool oneCopyAgreed(const Algorithm& algo, const std::vector<PeerInfo>& peers, const std::vector<OneCopyRecord>& all) {
  std::vector<AgreedCall> calls;
  calls.reserve(all.size());
  for (const OneCopyRecord& r : all) calls.push_back(r.call);
  if (!algo.agreed(calls)) return false;
  for (size_t q = 0; q < all.size(); ++q) {
    for (size_t t = 0; t < q; ++t) {
      const bool reach = sameProcess(peers[q], peers[t])
                             ? all[q].gpu.same(all[t].gpu)
                             : gpuPeers(DevicePeer{peers[q], all[q].gpu}, DevicePeer{peers[t], all[t].gpu});
      if (!reach) return false;
    }
  }
  return true;
}

static_assert(kOneCopyMaxRanks == device::OneCopyArgs::kMaxRanks, "the algorithm's ranks are the kernel's");

bool OneCopyExchange::candidate(const OpInfo& op) const {
  // The tuner offers an algorithm taken where the ranks agree (Algorithm::Taken::kIfAgreed; the
  // registry has one, one-copy: a device collective on channels, 2 to 8 ranks of one host,
  // CHORUS_ONECOPY).
  return op.device && runsOnChannels(op.coll) && comm_.devicePath().choice(op).ifAgreed.has_value();
}

Status OneCopyExchange::describe(const void* ptr, size_t bytes, bool crossProcess, bool userBuffer, bool* offers,
                                 OneCopyBuffer* out) {
  out->addr = reinterpret_cast<uintptr_t>(ptr);
  auto where = cuda::memInfo(ptr);
  if (!where.isOk() || !where.value().device || where.value().ordinal != comm_.devicePath().deviceComm()->device()) {
    *offers = false;
    return Status::ok();
  }
  if (!crossProcess) return Status::ok();
  const cuda::ShareableRange range = cuda::shareableRange(ptr, bytes);
  if (!range.base || (userBuffer && !comm_.memShare().covers(ptr, bytes))) {
    *offers = false;
    return Status::ok();
  }
  out->allocId = range.id;
  out->allocBytes = range.bytes;
  out->offset = static_cast<uint64_t>(static_cast<const char*>(ptr) - static_cast<const char*>(range.base));
  if (offered_.count(range.id)) return Status::ok();
  // Offered now to every peer in another process, each under its own token.
  out->token = randomU64() & ~uint64_t(0xff);
  const std::vector<PeerInfo>& peers = comm_.peers();
  const int me = comm_.rank();
  for (int p = 0; p < comm_.nranks(); ++p) {
    if (p == me || sameProcess(peers[me], peers[p])) continue;
    CHORUS_ASSIGN_OR_RETURN(int fd, cuda::exportShareable(range.base));
    comm_.bootstrap().exportFd(p, out->token + static_cast<uint64_t>(p), UniqueFd(fd));
  }
  offered_.insert(range.id);
  return Status::ok();
}

Status OneCopyExchange::exchange(std::vector<std::pair<Communicator*, const std::vector<OpInfo>*>>& work,
                                 std::vector<std::vector<const device::OneCopyArgs*>>* args) {
  args->assign(work.size(), {});
  struct Pending {
    Communicator* c;
    size_t at;  // in work
    size_t op;  // in its ops
    uint64_t tag;
    OneCopyRecord mine;
  };
  std::vector<Pending> pending;
  // Every candidate's record goes to every peer before any record is awaited.
  for (size_t w = 0; w < work.size(); ++w) {
    Communicator* c = work[w].first;
    const std::vector<OpInfo>& ops = *work[w].second;
    (*args)[w].assign(ops.size(), nullptr);
    for (size_t i = 0; i < ops.size(); ++i) {
      OneCopyExchange& x = c->devicePath().oneCopy();
      if (!x.candidate(ops[i])) continue;
      Pending p{c, w, i, makeTag(TagSpace::kOneCopy, x.calls_++), OneCopyRecord()};
      CHORUS_TRY(x.record(ops[i], &p.mine));
      for (int q = 0; q < c->nranks(); ++q) {
        if (q != c->rank()) CHORUS_TRY(c->bootstrap().send(q, p.tag, &p.mine, sizeof(p.mine)));
      }
      pending.push_back(p);
    }
  }
  for (Pending& p : pending) {
    Communicator* c = p.c;
    OneCopyExchange& x = c->devicePath().oneCopy();
    std::vector<OneCopyRecord> all(c->nranks());
    all[c->rank()] = p.mine;
    for (int q = 0; q < c->nranks(); ++q) {
      if (q == c->rank()) continue;
      CHORUS_ASSIGN_OR_RETURN(std::vector<char> bytes, c->bootstrap().recv(q, p.tag));
      if (bytes.size() != sizeof(OneCopyRecord)) {
        return internalError(c->describePeer(q) + " sent a one-copy record of " + std::to_string(bytes.size()) +
                             " bytes, not " + std::to_string(sizeof(OneCopyRecord)) + " (another build of Chorus?)");
      }
      std::memcpy(&all[q], bytes.data(), sizeof(OneCopyRecord));
      if (all[q].magic != kOneCopyMagic) return internalError(c->describePeer(q) + " sent a malformed one-copy record");
      CHORUS_TRY(x.map(q, all[q]));
    }
    CHORUS_ASSIGN_OR_RETURN((*args)[p.at][p.op], x.argsFor((*work[p.at].second)[p.op], all));
  }
  return Status::ok();
}

Status OneCopyExchange::record(const OpInfo& op, OneCopyRecord* r) {
  const std::vector<PeerInfo>& peers = comm_.peers();
  const int me = comm_.rank();
  const int nranks = comm_.nranks();
  bool crossProcess = false;
  for (int p = 0; p < nranks; ++p) crossProcess = crossProcess || !sameProcess(peers[me], peers[p]);
  const size_t bytes = op.count * typeSize(op.type);
  AgreedCall& call = r->call;
  call.count = op.count;
  call.type = static_cast<uint32_t>(op.type);
  call.coll = static_cast<uint32_t>(op.coll);
  call.root = static_cast<uint32_t>(op.root);
  const ReduceSpec& spec = op.spec;
  call.redKind = static_cast<uint32_t>(spec.kind);
  call.hasPre = spec.hasPre ? 1 : 0;
  call.hasPostDiv = spec.hasPostDiv ? 1 : 0;
  call.scaleF = spec.scaleF;
  call.scaleI = spec.scaleI;
  call.divisor = spec.divisor;
  r->gpu = comm_.devicePath().self().gpu;
  std::snprintf(r->server, sizeof(r->server), "%s", comm_.bootstrap().fdServerName().c_str());
  // A scalar the kernel reads from device memory is no value the ranks can agree on here.
  bool offers = bytes > 0 && !spec.scalePtr;
  // Only the buffers the kernel touches here (a root-only buffer at the root), each of its size.
  const Collective& c = collective(op.coll);
  const size_t blocks = bytes * static_cast<size_t>(nranks);
  if (c.send.usedBy(me, op.root)) {
    CHORUS_TRY(describe(op.sendbuff, c.send.perRank ? blocks : bytes, crossProcess, true, &offers, &r->send));
  }
  if (c.recv.usedBy(me, op.root)) {
    CHORUS_TRY(describe(op.recvbuff, c.recv.perRank ? blocks : bytes, crossProcess, true, &offers, &r->recv));
  }
  if (offers) {
    CHORUS_ASSIGN_OR_RETURN(uint64_t * area, comm_.devicePath().deviceComm()->oneCopySignal());
    CHORUS_TRY(describe(area, device::oneCopySignalBytes(), crossProcess, false, &offers, &r->signal));
  }
  call.offers = offers ? 1 : 0;
  return Status::ok();
}

Status OneCopyExchange::map(int peer, const OneCopyRecord& r) {
  DeviceComm& dev = *comm_.devicePath().deviceComm();
  const int me = comm_.rank();
  if (sameProcess(comm_.peers()[me], comm_.peers()[peer])) {
    // A thread of this process: its addresses as they are, and its signal area kept while this
    // communicator's kernels may write into it.
    return r.call.offers && r.signal.addr ? dev.holdPeerSignal(r.signal.addr) : Status::ok();
  }
  const std::string server(r.server, strnlen(r.server, sizeof(r.server)));
  for (const OneCopyBuffer* b : {&r.send, &r.recv, &r.signal}) {
    // Offered to every peer at once: taken now even when this operation will not run one-copy.
    if (!b->token || mapped_.count({peer, b->allocId})) continue;
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd,
                            comm_.bootstrap().importFd(peer, server, b->token + static_cast<uint64_t>(me)));
    cuda::DeviceGuard on(dev.device());
    CHORUS_TRY(on.status());
    CHORUS_ASSIGN_OR_RETURN(void* mem, cuda::importShareable(fd.get(), b->allocBytes, dev.device()));
    dev.adoptMapping(mem);
    mapped_[{peer, b->allocId}] = static_cast<char*>(mem);
  }
  return Status::ok();
}

Result<const device::OneCopyArgs*> OneCopyExchange::argsFor(const OpInfo& op, const std::vector<OneCopyRecord>& all) {
  const std::vector<PeerInfo>& peers = comm_.peers();
  if (!oneCopyAgreed(algorithm(*comm_.devicePath().choice(op).ifAgreed), peers, all)) return nullptr;
  DeviceComm& dev = *comm_.devicePath().deviceComm();
  const int me = comm_.rank();
  const int nranks = comm_.nranks();
  device::OneCopyArgs a;
  a.nranks = static_cast<uint32_t>(nranks);
  a.rank = static_cast<uint32_t>(me);
  a.parts = oneCopyParts(op.coll, op.count * typeSize(op.type), nranks);
  a.layout = device::oneCopyLayout(collective(op.coll));
  a.root = static_cast<uint8_t>(op.root);
  a.count = op.count;
  for (int q = 0; q < nranks; ++q) {
    const OneCopyRecord& r = all[q];
    if (sameProcess(peers[me], peers[q])) {
      // This GPU (oneCopyAgreed): its addresses as they are.
      a.input[q] = reinterpret_cast<const char*>(r.send.addr);
      a.output[q] = reinterpret_cast<char*>(r.recv.addr);
      a.signal[q] = reinterpret_cast<uint64_t*>(r.signal.addr);
      continue;
    }
    auto at = [&](const OneCopyBuffer& b) -> Result<char*> {
      if (!b.addr) return nullptr;  // not one the kernel touches
      auto it = mapped_.find({q, b.allocId});
      if (it == mapped_.end()) {
        return internalError(comm_.describePeer(q) + " named device memory it never offered here (allocation " +
                             std::to_string(b.allocId) + ")");
      }
      return it->second + b.offset;
    };
    CHORUS_ASSIGN_OR_RETURN(char* in, at(r.send));
    CHORUS_ASSIGN_OR_RETURN(char* out, at(r.recv));
    CHORUS_ASSIGN_OR_RETURN(char* signal, at(r.signal));
    a.input[q] = in;
    a.output[q] = out;
    a.signal[q] = reinterpret_cast<uint64_t*>(signal);
  }
  return dev.oneCopyArgs(a);
}

}  // namespace chorus
