#include "transports/net/rdma_proto.h"

#include <chrono>
#include <cstddef>
#include <string>

namespace chorus {
namespace rdma {

uint32_t packImm(const Imm& imm) {
  return static_cast<uint32_t>(imm.kind) | (imm.slot & 31u) << 2 | (imm.msg & 7u) << 7 |
         (imm.size & kInlineMaxBytes) << 10;
}

Imm unpackImm(uint32_t word) {
  Imm imm;
  imm.kind = static_cast<ImmKind>(word & 3u);
  imm.slot = (word >> 2) & 31u;
  imm.msg = (word >> 7) & 7u;
  imm.size = word >> 10;
  return imm;
}

static_assert(kSlots <= 32, "the immediate has 5 bits for the slot");
static_assert(kMaxRecvs <= 8, "the immediate has 3 bits for the message");

Proto::Proto(Wire* wire, ProtoMem* mem, MemRef memRef, bool send)
    : wire_(wire), mem_(mem), memRef_(memRef), send_(send) {}

void Proto::setPeer(uint64_t peerMemAddr, uint64_t peerKey) {
  peerMem_ = peerMemAddr;
  peerKey_ = peerKey;
  peerKnown_ = true;
}

Proto* Proto::owner(void* request) { return static_cast<Request*>(request)->proto; }

chorusResult_t Proto::fail(const std::string& why) {
  if (!failed_) {
    failed_ = true;
    failure_ = why;
  }
  return chorusRemoteError;
}

namespace {
int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

bool Proto::waiting() const {
  if (starved_) return true;
  for (const Request& r : reqs_) {
    if (r.inUse) return true;
  }
  return false;
}

chorusResult_t Proto::control(uint32_t ctl, void* ctx) {
  // A write of no bytes to the peer's ProtoMem (registered, so every fabric takes it).
  return wire_->write(mem_, 0, memRef_.desc, peerMem_, peerKey_, packImm({ImmKind::kCts, 0, ctl, 0}), ctx);
}

chorusResult_t Proto::progress() {
  if (failed_) return chorusRemoteError;
  if (wire_->poll(*this) != chorusSuccess) return fail(wire_->why());
  if (failed_) return chorusRemoteError;
  if (peerKnown_ && waiting()) {
    const int64_t now = nowNs();
    if (lastNewsNs_ == 0) lastNewsNs_ = now;
    if (now - lastNewsNs_ > kProbeNs) {
      lastNewsNs_ = now;
      if (control(kCtlProbe, nullptr) != chorusSuccess) return fail(wire_->why());
    }
  }
  return chorusSuccess;
}

bool Proto::sayGoodbye() {
  if (failed_ || !peerKnown_) return true;
  if (byeCtx_ == 0) {
    byeCtx_ = 1;
    if (control(kCtlBye, &byeCtx_) != chorusSuccess) return true;
  }
  if (wire_->poll(*this) != chorusSuccess) return true;
  return byeLeft_;
}

Proto::Request* Proto::freeRequest(bool send) {
  for (Request& r : reqs_) {
    if (r.inUse) continue;
    r = Request{};
    r.proto = this;
    r.inUse = true;
    r.send = send;
    return &r;
  }
  return nullptr;
}

chorusResult_t Proto::isend(void* data, size_t size, int tag, const MemRef* mr, void** request) {
  *request = nullptr;
  if (!send_) return chorusInternalError;
  if (progress() != chorusSuccess || !peerKnown_) return failed_ ? chorusRemoteError : chorusSuccess;
  const uint32_t slot = sendSeq_ % kSlots;
  if (!ctsIn_[slot]) {
    starved_ = true;  // the receive is not posted yet: a send waits (and probes a peer that is gone)
    return chorusSuccess;
  }
  const CtsEntry& e = mem_->cts[slot];
  if (e.seq != sendSeq_ || e.n < 1 || e.n > uint32_t(kMaxRecvs)) {
    return fail("clear-to-send entry " + std::to_string(sendSeq_) + " arrived as entry " + std::to_string(e.seq) +
                " of " + std::to_string(e.n) + " messages");
  }
  int msg = -1;
  for (uint32_t i = 0; i < e.n && msg < 0; ++i) {
    if (!(matched_ & (1u << i)) && e.tag[i] == tag) msg = int(i);
  }
  if (msg < 0) {
    std::string tags;
    for (uint32_t i = 0; i < e.n; ++i) tags += (i ? ", " : "") + std::to_string(e.tag[i]);
    return fail("a message tagged " + std::to_string(tag) + " matches no open receive of the peer's group (tags " +
                tags + ")");
  }
  Request* r = freeRequest(true);
  if (!r) return chorusSuccess;
  const uint64_t recOff = offsetof(ProtoMem, rec) + (slot * kMaxRecvs + uint32_t(msg)) * sizeof(SizeRecord);
  SizeRecord& rec = mem_->rec[slot][msg];
  const Imm base{ImmKind::kRecord, slot, uint32_t(msg), 0};
  if (size > e.size[msg]) {
    // The receiver learns the size from the record and fails its receive too.
    rec = SizeRecord{size, 0};
    (void)wire_->write(&rec, sizeof rec, memRef_.desc, peerMem_ + recOff, peerKey_, packImm(base), nullptr);
    r->inUse = false;
    return fail("a message of " + std::to_string(size) + " bytes is longer than the peer's receive of " +
                std::to_string(e.size[msg]) + " bytes");
  }
  r->n = 1;
  r->size[0] = size;
  const size_t seg = wire_->segmentBytes(size);
  chorusResult_t rc;
  if (size <= kInlineMaxBytes && size <= seg) {
    r->pending = 1;
    rc = wire_->write(data, size, mr ? mr->desc : nullptr, e.addr[msg], e.key[msg],
                      packImm({ImmKind::kInline, slot, uint32_t(msg), uint32_t(size)}), r);
  } else {
    const uint64_t writes = (size + seg - 1) / seg;
    rec = SizeRecord{size, writes};
    r->pending = uint32_t(1 + writes);
    rc = wire_->write(&rec, sizeof rec, memRef_.desc, peerMem_ + recOff, peerKey_, packImm(base), r);
    for (uint64_t w = 0; w < writes && rc == chorusSuccess; ++w) {
      const size_t off = size_t(w) * seg;
      const size_t len = size - off < seg ? size - off : seg;
      rc = wire_->write(static_cast<char*>(data) + off, len, mr ? mr->desc : nullptr, e.addr[msg] + off, e.key[msg],
                        packImm({ImmKind::kSegment, slot, uint32_t(msg), 0}), r);
    }
  }
  if (rc != chorusSuccess) return fail(wire_->why());
  matched_ |= 1u << msg;
  if (uint32_t(__builtin_popcount(matched_)) == e.n) {
    ctsIn_[slot] = false;
    matched_ = 0;
    ++sendSeq_;
  }
  *request = r;
  return chorusSuccess;
}

chorusResult_t Proto::irecv(int n, void** data, const size_t* sizes, const int* tags, MemRef* const* mrs,
                            void** request) {
  *request = nullptr;
  if (send_) return chorusInternalError;
  if (n < 1 || n > kMaxRecvs) return chorusInvalidArgument;
  if (progress() != chorusSuccess || !peerKnown_) return failed_ ? chorusRemoteError : chorusSuccess;
  const uint32_t slot = recvSeq_ % kSlots;
  if (slotOwner_[slot]) return chorusSuccess;
  Request* r = freeRequest(false);
  if (!r) return chorusSuccess;
  CtsEntry& e = mem_->cts[slot];
  e = CtsEntry{};
  for (int i = 0; i < n; ++i) {
    e.addr[i] = mrs[i] ? mrs[i]->remoteAddr(data[i]) : 0;
    e.key[i] = mrs[i] ? mrs[i]->key : 0;
    e.size[i] = sizes[i];
    e.tag[i] = tags[i];
    r->size[i] = sizes[i];
  }
  e.n = uint32_t(n);
  e.seq = recvSeq_;
  r->n = n;
  r->slot = slot;
  r->pending = 1;
  const uint64_t ctsOff = offsetof(ProtoMem, cts) + slot * sizeof(CtsEntry);
  if (wire_->write(&e, sizeof e, memRef_.desc, peerMem_ + ctsOff, peerKey_, packImm({ImmKind::kCts, slot, 0, 0}), r) !=
      chorusSuccess) {
    r->inUse = false;
    return fail(wire_->why());
  }
  slotOwner_[slot] = r;
  ++recvSeq_;
  *request = r;
  return chorusSuccess;
}

void Proto::localDone(void* ctx) {
  lastNewsNs_ = 0;
  if (ctx == &byeCtx_) byeLeft_ = true;
  if (!ctx || ctx == &byeCtx_) return;
  Request* r = static_cast<Request*>(ctx);
  if (r->pending > 0) --r->pending;
}

void Proto::remoteWrite(uint32_t word) {
  const Imm imm = unpackImm(word);
  lastNewsNs_ = 0;
  if (imm.kind == ImmKind::kCts && (imm.msg == kCtlProbe || imm.msg == kCtlBye)) {
    if (imm.msg == kCtlBye && !failed_) {
      byePeer_ = true;
      (void)fail("the peer closed the connection");
    }
    return;
  }
  if (send_) {
    if (imm.kind != ImmKind::kCts || ctsIn_[imm.slot]) {
      (void)fail("the peer wrote an unexpected immediate " + std::to_string(word) + " to a send comm");
      return;
    }
    ctsIn_[imm.slot] = true;
    starved_ = false;
    return;
  }
  Request* r = slotOwner_[imm.slot];
  if (imm.kind == ImmKind::kCts || !r || int(imm.msg) >= r->n) {
    (void)fail("the peer wrote to slot " + std::to_string(imm.slot) + ", message " + std::to_string(imm.msg) +
               ", which no open receive has");
    return;
  }
  const uint32_t m = imm.msg;
  switch (imm.kind) {
    case ImmKind::kInline:
      r->got[m] = imm.size;
      r->known[m] = true;
      break;
    case ImmKind::kRecord: {
      const SizeRecord rec = mem_->rec[imm.slot][m];
      if (rec.size > r->size[m]) {
        (void)fail("the peer sent " + std::to_string(rec.size) + " bytes to a receive of " +
                   std::to_string(r->size[m]) + " bytes");
        return;
      }
      r->got[m] = rec.size;
      r->writes[m] = rec.writes;
      r->known[m] = true;
      break;
    }
    case ImmKind::kSegment:
      ++r->arrived[m];
      break;
    case ImmKind::kCts:
      break;
  }
}

bool Proto::complete(const Request& r) const {
  if (r.pending > 0) return false;
  if (r.send) return true;
  for (int i = 0; i < r.n; ++i) {
    if (!r.known[i] || r.arrived[i] != r.writes[i]) return false;
  }
  return true;
}

chorusResult_t Proto::testRequest(void* request, int* done, size_t* sizes) {
  *done = 0;
  Request* r = static_cast<Request*>(request);
  Proto& p = *r->proto;
  // A request done before the comm failed (the peer said goodbye after its last message) is done.
  const chorusResult_t rc = p.progress();
  if (!p.complete(*r)) return rc;
  *done = 1;
  if (sizes) {
    for (int i = 0; i < r->n; ++i) sizes[i] = r->send ? r->size[i] : r->got[i];
  }
  if (!r->send) p.slotOwner_[r->slot] = nullptr;
  r->inUse = false;
  return chorusSuccess;
}

}  // namespace rdma
}  // namespace chorus
