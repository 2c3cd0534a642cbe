#include "tests/grid/grid.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kernels/float_elem.h"

namespace chorus::test {

const char* collName(Coll c) {
  static const char* k[] = {"allreduce", "broadcast", "reduce",   "allgather",  "reducescatter", "alltoall",
                            "gather",    "scatter",   "sendrecv", "allgatherv", "reducescatterv"};
  return k[static_cast<int>(c)];
}

std::vector<size_t> vCounts(size_t count, int n) {
  std::vector<size_t> counts(n);
  for (int r = 0; r < n; ++r) counts[r] = r % 3 == 1 ? 0 : count + static_cast<size_t>(r);
  return counts;
}

const char* opName(Op o) {
  static const char* k[] = {"sum", "prod", "max", "min", "avg", "premulsum", "band", "bor", "bxor", "-"};
  return k[static_cast<int>(o)];
}

namespace {

const char* typeName(chorusDataType_t t) {
  static const char* k[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",   "uint64",
                            "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return k[t];
}

size_t tsize(chorusDataType_t t) {
  switch (t) {
    case chorusInt8:
    case chorusUint8:
    case chorusFloat8e4m3:
    case chorusFloat8e5m2:
      return 1;
    case chorusFloat16:
    case chorusBfloat16:
      return 2;
    case chorusInt32:
    case chorusUint32:
    case chorusFloat32:
      return 4;
    default:
      return 8;
  }
}

bool isFloat(chorusDataType_t t) {
  return t == chorusFloat16 || t == chorusFloat32 || t == chorusFloat64 || t == chorusBfloat16 ||
         t == chorusFloat8e4m3 || t == chorusFloat8e5m2;
}

bool isSigned(chorusDataType_t t) { return t == chorusInt8 || t == chorusInt32 || t == chorusInt64; }

uint64_t mixHash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// Largest magnitude of an input such that n of them sum exactly in the type.
int64_t sumRange(chorusDataType_t t, int n) {
  switch (t) {
    case chorusFloat8e4m3:
      return std::max(1, 16 / n);
    case chorusFloat8e5m2:
      return std::max(1, 8 / n);
    case chorusBfloat16:
      return std::max(1, 128 / n);
    case chorusFloat16:
      return std::max(1, 1024 / n);
    case chorusFloat32:
    case chorusFloat64:
      return 100000;
    default:
      return int64_t(1) << 40;  // integers wrap; any value works
  }
}

// The input of `rank` at element `i` for a case, as a double (floats) or raw integer bits.
struct Value {
  double f = 0;
  uint64_t u = 0;
};

Value inputValue(const Case& c, int nranks, int rank, size_t i) {
  const uint64_t h = mixHash((uint64_t(rank) << 40) ^ (uint64_t(i) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(c.coll) << 56) ^
                             uint64_t(c.type) << 48 ^ uint64_t(c.op) << 52);
  Value v;
  if (!isFloat(c.type)) {
    v.u = h;
    if (c.op == Op::kPreMulSum || c.op == Op::kAvg || c.op == Op::kSum || c.op == Op::kProd) v.u = h;
    return v;
  }
  if (c.op == Op::kProd) {
    static const double kChoices[] = {1.0, -1.0, 2.0, 1.0, -1.0, 0.5};
    // At most one factor of 2 or 0.5 per rank per element keeps every product exact.
    v.f = kChoices[h % 6];
    return v;
  }
  int64_t range = sumRange(c.type, nranks);
  if (c.op == Op::kPreMulSum) range = std::max<int64_t>(1, range / 2);
  v.f = static_cast<double>(static_cast<int64_t>(h % uint64_t(2 * range + 1)) - range);
  return v;
}

// Stores a value (exact in the type by construction) as the type's bits.
void storeValue(chorusDataType_t t, void* p, const Value& v) {
  if (isFloat(t)) {
    storeFloatElem(t, p, v.f);
  } else {
    std::memcpy(p, &v.u, tsize(t));  // little-endian: the low bytes
  }
}

// Sign-extends or truncates to the type's width.
int64_t asSigned(chorusDataType_t t, uint64_t u) {
  const int bits = static_cast<int>(tsize(t) * 8);
  if (bits == 64) return static_cast<int64_t>(u);
  const uint64_t m = (uint64_t(1) << bits) - 1;
  u &= m;
  if (isSigned(t) && (u >> (bits - 1))) return static_cast<int64_t>(u | ~m);
  return static_cast<int64_t>(u);
}

// The reduction over ranks of element `i` of their inputs (blockBase: which element of the
// input each rank contributes), as the type's bits, plus a tolerance flag.
struct Expect {
  std::vector<unsigned char> bits;
  bool approximate = false;
  double value = 0;
};

Expect reduceRef(const Case& c, int nranks, size_t elem) {
  Expect e;
  e.bits.resize(tsize(c.type));
  const chorusDataType_t t = c.type;
  if (isFloat(t)) {
    double acc = 0;
    for (int r = 0; r < nranks; ++r) {
      double x = inputValue(c, nranks, r, elem).f;
      if (c.op == Op::kPreMulSum) x *= 2.0;
      if (r == 0) {
        acc = x;
        continue;
      }
      switch (c.op) {
        case Op::kProd:
          acc *= x;
          break;
        case Op::kMax:
          acc = std::max(acc, x);
          break;
        case Op::kMin:
          acc = std::min(acc, x);
          break;
        default:
          acc += x;
          break;
      }
    }
    if (c.op == Op::kAvg) {
      acc /= nranks;
      e.approximate = true;
    }
    e.value = acc;
    Value v;
    v.f = acc;
    storeValue(t, e.bits.data(), v);
    return e;
  }
  // Integers: wrap in the type's width; signedness matters for max, min and avg.
  const int bits = static_cast<int>(tsize(t) * 8);
  const uint64_t mask = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  uint64_t acc = 0;
  for (int r = 0; r < nranks; ++r) {
    uint64_t x = inputValue(c, nranks, r, elem).u & mask;
    if (c.op == Op::kPreMulSum) x = (x * 3) & mask;
    if (r == 0) {
      acc = x;
      continue;
    }
    switch (c.op) {
      case Op::kProd:
        acc = (acc * x) & mask;
        break;
      case Op::kMax:
        acc = isSigned(t) ? (asSigned(t, x) > asSigned(t, acc) ? x : acc) : std::max(acc, x);
        break;
      case Op::kMin:
        acc = isSigned(t) ? (asSigned(t, x) < asSigned(t, acc) ? x : acc) : std::min(acc, x);
        break;
      case Op::kBand:
        acc &= x;
        break;
      case Op::kBor:
        acc |= x;
        break;
      case Op::kBxor:
        acc ^= x;
        break;
      default:
        acc = (acc + x) & mask;
        break;
    }
  }
  if (c.op == Op::kAvg) {
    if (isSigned(t)) {
      acc = static_cast<uint64_t>(asSigned(t, acc) / nranks) & mask;
    } else {
      acc = acc / static_cast<uint64_t>(nranks);
    }
  }
  std::memcpy(e.bits.data(), &acc, e.bits.size());
  return e;
}

Expect copyRef(const Case& c, int nranks, int rank, size_t elem) {
  Expect e;
  e.bits.resize(tsize(c.type));
  storeValue(c.type, e.bits.data(), inputValue(c, nranks, rank, elem));
  return e;
}

double tolerance(chorusDataType_t t) {
  switch (t) {
    case chorusFloat8e4m3:
      return 0.13;
    case chorusFloat8e5m2:
      return 0.26;
    case chorusBfloat16:
      return 0.02;
    case chorusFloat16:
      return 0.002;
    case chorusFloat32:
      return 1e-5;
    default:
      return 1e-12;
  }
}

// A buffer with guard bytes on both sides and an optional misalignment. With `comm`, it comes
// from chorusMemAlloc and is registered with comm, so peers in other processes read it in place.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kFill = 0xA5;
  GuardedBuffer(size_t bytes, size_t misalign, chorusComm_t comm = nullptr)
      : bytes_(bytes), misalign_(misalign), comm_(comm) {
    const size_t total = bytes + 2 * kGuard + misalign + 64;
    if (comm_) {
      if (chorusMemAlloc(&shared_, total) != chorusSuccess) {
        error_ = std::string("chorusMemAlloc: ") + chorusGetLastError(comm_);
        comm_ = nullptr;
        mem_.assign(total, kFill);
        return;
      }
      if (chorusCommRegister(comm_, shared_, total, &handle_) != chorusSuccess) {
        error_ = std::string("chorusCommRegister: ") + chorusGetLastError(comm_);
      }
      std::memset(shared_, kFill, total);
    } else {
      mem_.assign(total, kFill);
    }
  }
  ~GuardedBuffer() {
    if (comm_) {
      if (handle_) chorusCommDeregister(comm_, handle_);
      chorusMemFree(shared_);
    }
  }
  const std::string& error() const { return error_; }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  unsigned char* data() { return base() + kGuard; }
  size_t bytes() const { return bytes_; }
  // Offset of the first modified guard byte, or -1.
  long guardDamage() {
    unsigned char* b = base();
    for (size_t i = 0; i < kGuard; ++i) {
      if (b[i] != kFill) return static_cast<long>(i) - static_cast<long>(kGuard);
      if (b[kGuard + bytes_ + i] != kFill) return static_cast<long>(bytes_ + i);
    }
    return -1;
  }

 private:
  unsigned char* base() {
    auto addr = reinterpret_cast<uintptr_t>(comm_ ? shared_ : mem_.data());
    uintptr_t aligned = (addr + 63) & ~uintptr_t(63);
    return reinterpret_cast<unsigned char*>(aligned) + misalign_;
  }
  size_t bytes_;
  size_t misalign_;
  chorusComm_t comm_;
  void* shared_ = nullptr;
  void* handle_ = nullptr;
  std::string error_;
  std::vector<unsigned char> mem_;
};

std::string hexBytes(const unsigned char* p, size_t n) {
  std::ostringstream o;
  o << "0x";
  for (size_t i = n; i-- > 0;) {
    static const char* d = "0123456789abcdef";
    o << d[p[i] >> 4] << d[p[i] & 15];
  }
  return o.str();
}

uint64_t fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

std::string Case::describe() const {
  std::ostringstream o;
  o << collName(coll) << " " << typeName(type) << " " << opName(op) << " count=" << count << " root=" << root
    << (inPlace ? " in-place" : " out-of-place") << (misalign ? " misaligned+" + std::to_string(misalign) : "");
  return o.str();
}

std::vector<Case> makeGrid(int nranks, const GridOptions& opts) {
  std::vector<Coll> colls = opts.colls;
  if (colls.empty()) {
    colls = {Coll::kAllReduce,     Coll::kBroadcast,  Coll::kReduce,        Coll::kAllGather,
             Coll::kReduceScatter, Coll::kAlltoAll,   Coll::kGather,        Coll::kScatter,
             Coll::kSendRecv,      Coll::kAllGatherV, Coll::kReduceScatterV};
  }
  std::vector<chorusDataType_t> types = opts.types;
  if (types.empty()) {
    for (int t = 0; t < chorusNumTypes; ++t) types.push_back(static_cast<chorusDataType_t>(t));
  }
  const std::vector<Op> reduceOps = {Op::kSum, Op::kProd, Op::kMax, Op::kMin, Op::kAvg, Op::kPreMulSum};
  // Counts: empty, one, odd, and around the ring's loop boundaries for the tests' slot size
  // (CHORUS_SLOT_BYTES=4096, CHORUS_SLOTS=4: a loop is 2 slots per rank block).
  std::vector<size_t> counts = {0, 1, 7, 1023};
  std::vector<size_t> boundaryCounts;
  for (size_t es : {1, 2, 4, 8}) {
    const size_t loop = 2 * 4096 / es * static_cast<size_t>(nranks);
    boundaryCounts.push_back(loop - 1);
    boundaryCounts.push_back(loop + 1);
  }
  std::vector<Case> out;
  size_t pairwise = 0;
  for (Coll coll : colls) {
    const bool reduces = coll == Coll::kAllReduce || coll == Coll::kReduce || coll == Coll::kReduceScatter ||
                         coll == Coll::kReduceScatterV;
    const bool rooted =
        coll == Coll::kBroadcast || coll == Coll::kReduce || coll == Coll::kGather || coll == Coll::kScatter;
    const bool inPlaceOk = coll != Coll::kAlltoAll && coll != Coll::kSendRecv;
    for (chorusDataType_t type : types) {
      std::vector<Op> ops = reduces ? reduceOps : std::vector<Op>{Op::kNone};
      if (reduces && !isFloat(type)) ops.insert(ops.end(), {Op::kBand, Op::kBor, Op::kBxor});
      for (Op op : ops) {
        for (int inPlace = 0; inPlace < (inPlaceOk ? 2 : 1); ++inPlace) {
          // Pairwise subset: one count per (type, op, in-place) combination, rotating.
          std::vector<size_t> cs = counts;
          for (size_t b : boundaryCounts) {
            if (b * tsize(type) < (1u << 20)) cs.push_back(b);
          }
          if (!opts.full) cs = {cs[pairwise++ % cs.size()], 7};
          for (size_t count : cs) {
            const int roots = rooted ? (opts.full ? nranks : 1) : 1;
            for (int r = 0; r < roots; ++r) {
              const int root = rooted && !opts.full ? static_cast<int>(pairwise % nranks) : r;
              const size_t mis = (count % 2 == 1 && tsize(type) > 1) ? 1 : 0;  // odd counts: unaligned too
              out.push_back(Case{coll, type, op, count, root, inPlace == 1, mis});
            }
          }
        }
      }
    }
  }
  if (opts.large) {
    // Several MiB through every collective, on two types.
    for (Coll coll : colls) {
      for (chorusDataType_t type : {chorusFloat32, chorusInt8}) {
        if (std::find(types.begin(), types.end(), type) == types.end()) continue;
        const bool reduces = coll == Coll::kAllReduce || coll == Coll::kReduce || coll == Coll::kReduceScatter ||
                             coll == Coll::kReduceScatterV;
        out.push_back(Case{coll, type, reduces ? Op::kSum : Op::kNone, (size_t(3) << 20) / tsize(type) + 3, nranks - 1,
                           false, 0});
      }
    }
  }
  return out;
}

CaseResult runCase(chorusComm_t comm, const Case& c, chorusStream_t stream) {
  CaseResult res;
  int rank = 0;
  int n = 1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  const size_t es = tsize(c.type);
  const size_t count = c.count;
  auto fail = [&](const std::string& why) {
    if (res.ok) {
      res.ok = false;
      res.error = "rank " + std::to_string(rank) + ": " + c.describe() + ": " + why;
    }
  };

  // Element counts of the send and receive buffers.
  size_t sendElems = count;
  size_t recvElems = count;
  switch (c.coll) {
    case Coll::kAllGather:
    case Coll::kGather:
      recvElems = count * n;
      break;
    case Coll::kReduceScatter:
    case Coll::kScatter:
      sendElems = count * n;
      break;
    case Coll::kAlltoAll:
      sendElems = recvElems = count * n;
      break;
    default:
      break;
  }
  // A v-collective's blocks, packed: rank r's at displs[r].
  std::vector<size_t> vcounts, displs;
  if (c.coll == Coll::kAllGatherV || c.coll == Coll::kReduceScatterV) {
    vcounts = vCounts(count, n);
    displs.assign(n, 0);
    for (int r = 1; r < n; ++r) displs[r] = displs[r - 1] + vcounts[r - 1];
    const size_t total = displs[n - 1] + vcounts[n - 1];
    sendElems = c.coll == Coll::kAllGatherV ? vcounts[rank] : total;
    recvElems = c.coll == Coll::kAllGatherV ? total : vcounts[rank];
  }
  // In place, one buffer serves both; it has the larger size.
  // CHORUS_GRID_REGISTER=1: every buffer registered (chorusMemAlloc + chorusCommRegister).
  static const bool registerBuffers = [] {
    const char* v = std::getenv("CHORUS_GRID_REGISTER");
    return v && std::string(v) == "1";
  }();
  chorusComm_t regComm = registerBuffers ? comm : nullptr;
  GuardedBuffer sendBuf(sendElems * es, c.misalign, regComm);
  GuardedBuffer recvBuf(recvElems * es, c.misalign, regComm);
  if (!sendBuf.error().empty() || !recvBuf.error().empty()) {
    CaseResult r;
    r.ok = false;
    r.error = sendBuf.error() + recvBuf.error();
    return r;
  }
  unsigned char* sb = sendBuf.data();
  unsigned char* rb = recvBuf.data();
  if (c.inPlace) {
    switch (c.coll) {
      case Coll::kAllGather:
        sb = rb + size_t(rank) * count * es;
        break;
      case Coll::kGather:
        if (rank == c.root) sb = rb + size_t(rank) * count * es;
        break;
      case Coll::kReduceScatter:
        rb = sb + size_t(rank) * count * es;
        break;
      case Coll::kScatter:
        if (rank == c.root) rb = sb + size_t(rank) * count * es;
        break;
      case Coll::kAllGatherV:
        sb = rb + displs[rank] * es;
        break;
      case Coll::kReduceScatterV:
        rb = sb + displs[rank] * es;
        break;
      default:
        sb = rb;
        break;
    }
  }
  // Inputs: element j of the send buffer is inputValue(rank, j).
  for (size_t j = 0; j < sendElems; ++j) storeValue(c.type, sb + j * es, inputValue(c, n, rank, j));

  chorusRedOp_t op = chorusSum;
  chorusRedOp_t custom = chorusSum;
  bool madeCustom = false;
  switch (c.op) {
    case Op::kProd:
      op = chorusProd;
      break;
    case Op::kMax:
      op = chorusMax;
      break;
    case Op::kMin:
      op = chorusMin;
      break;
    case Op::kAvg:
      op = chorusAvg;
      break;
    case Op::kBand:
      op = chorusBand;
      break;
    case Op::kBor:
      op = chorusBor;
      break;
    case Op::kBxor:
      op = chorusBxor;
      break;
    case Op::kPreMulSum: {
      unsigned char scalar[8] = {0};
      Value v;
      v.f = 2.0;
      v.u = 3;
      storeValue(c.type, scalar, v);
      if (chorusRedOpCreatePreMulSum(&custom, scalar, c.type, chorusScalarHostImmediate, comm) != chorusSuccess) {
        fail(std::string("chorusRedOpCreatePreMulSum failed: ") + chorusGetLastError(comm));
        return res;
      }
      madeCustom = true;
      op = custom;
      break;
    }
    default:
      break;
  }

  chorusResult_t rc = chorusSuccess;
  switch (c.coll) {
    case Coll::kAllReduce:
      rc = chorusAllReduce(sb, rb, count, c.type, op, comm, stream);
      break;
    case Coll::kBroadcast:
      rc = chorusBroadcast(sb, rb, count, c.type, c.root, comm, stream);
      break;
    case Coll::kReduce:
      rc = chorusReduce(sb, rb, count, c.type, op, c.root, comm, stream);
      break;
    case Coll::kAllGather:
      rc = chorusAllGather(sb, rb, count, c.type, comm, stream);
      break;
    case Coll::kReduceScatter:
      rc = chorusReduceScatter(sb, rb, count, c.type, op, comm, stream);
      break;
    case Coll::kAlltoAll:
      rc = chorusAlltoAll(sb, rb, count, c.type, comm, stream);
      break;
    case Coll::kGather:
      rc = chorusGather(sb, rb, count, c.type, c.root, comm, stream);
      break;
    case Coll::kScatter:
      rc = chorusScatter(sb, rb, count, c.type, c.root, comm, stream);
      break;
    case Coll::kSendRecv:
      chorusGroupStart();
      chorusSend(sb, count, c.type, (rank + 1) % n, comm, stream);
      chorusRecv(rb, count, c.type, (rank - 1 + n) % n, comm, stream);
      rc = chorusGroupEnd();
      break;
    case Coll::kAllGatherV:
      rc = chorusAllGatherV(sb, vcounts[rank], rb, vcounts.data(), displs.data(), c.type, comm, stream);
      break;
    case Coll::kReduceScatterV:
      rc = chorusReduceScatterV(sb, vcounts.data(), nullptr, rb, vcounts[rank], c.type, op, comm, stream);
      break;
  }
  if (rc == chorusSuccess && stream) rc = chorusStreamSynchronize(stream);
  if (madeCustom) chorusRedOpDestroy(custom, comm);
  if (rc != chorusSuccess) {
    fail(std::string("call failed: ") + chorusGetErrorString(rc) + ": " + chorusGetLastError(comm));
    return res;
  }

  // Expected contents of the receive region.
  auto check = [&](const unsigned char* base, size_t elems, auto expectAt) {
    for (size_t j = 0; j < elems && res.ok; ++j) {
      Expect e = expectAt(j);
      const unsigned char* got = base + j * es;
      if (std::memcmp(got, e.bits.data(), es) == 0) continue;
      if (e.approximate) {
        const double g = loadFloatElem(c.type, got);
        // The 1/n scaling rounds once per input and once per addition.
        const double scale = static_cast<double>(sumRange(c.type, n)) + std::fabs(e.value);
        if (std::fabs(g - e.value) <= tolerance(c.type) * scale) continue;
      }
      fail("element " + std::to_string(j) + " is " + hexBytes(got, es) + ", expected " + hexBytes(e.bits.data(), es));
    }
  };
  bool sameEverywhere = false;
  switch (c.coll) {
    case Coll::kAllReduce:
      check(rb, count, [&](size_t j) { return reduceRef(c, n, j); });
      sameEverywhere = true;
      break;
    case Coll::kReduce:
      if (rank == c.root) {
        check(rb, count, [&](size_t j) { return reduceRef(c, n, j); });
      } else if (!c.inPlace) {
        for (size_t j = 0; j < count * es && res.ok; ++j) {
          if (rb[j] != GuardedBuffer::kFill)
            fail("a non-root rank's recvbuff was written at byte " + std::to_string(j));
        }
      }
      break;
    case Coll::kBroadcast:
      check(rb, count, [&](size_t j) { return copyRef(c, n, c.root, j); });
      sameEverywhere = true;
      break;
    case Coll::kAllGather:
      check(rb, count * n, [&](size_t j) { return copyRef(c, n, static_cast<int>(j / count), j % count); });
      sameEverywhere = true;
      break;
    case Coll::kReduceScatter:
      check(rb, count, [&](size_t j) { return reduceRef(c, n, size_t(rank) * count + j); });
      break;
    case Coll::kAlltoAll:
      check(rb, count * n,
            [&](size_t j) { return copyRef(c, n, static_cast<int>(j / count), size_t(rank) * count + j % count); });
      break;
    case Coll::kGather:
      if (rank == c.root) {
        check(rb, count * n, [&](size_t j) { return copyRef(c, n, static_cast<int>(j / count), j % count); });
      }
      break;
    case Coll::kScatter:
      check(rb, count, [&](size_t j) { return copyRef(c, n, c.root, size_t(rank) * count + j); });
      break;
    case Coll::kSendRecv:
      check(rb, count, [&](size_t j) { return copyRef(c, n, (rank - 1 + n) % n, j); });
      break;
    case Coll::kAllGatherV:
      for (int r = 0; r < n; ++r) {
        check(rb + displs[r] * es, vcounts[r], [&](size_t j) { return copyRef(c, n, r, j); });
      }
      sameEverywhere = true;
      break;
    case Coll::kReduceScatterV:
      check(rb, vcounts[rank], [&](size_t j) { return reduceRef(c, n, displs[rank] + j); });
      break;
  }
  if (long d = sendBuf.guardDamage(); d != -1) fail("wrote outside the send buffer at byte " + std::to_string(d));
  if (long d = recvBuf.guardDamage(); d != -1) fail("wrote outside the receive buffer at byte " + std::to_string(d));
  // Out of place, the input must be untouched.
  if (!c.inPlace) {
    for (size_t j = 0; j < sendElems && res.ok; ++j) {
      Expect e = copyRef(c, n, rank, j);
      if (std::memcmp(sb + j * es, e.bits.data(), es) != 0)
        fail("the send buffer changed at element " + std::to_string(j));
    }
  }
  if (sameEverywhere) res.resultHash = fnv(rb, recvElems * es);
  return res;
}

}  // namespace chorus::test
