#include "process_group.h"

#include <torch/python.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <pybind11/chrono.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>

namespace chorus_torch {
namespace {

std::string lastError() { return chorusGetLastError(nullptr); }

void check(chorusResult_t rc, const std::string& what) {
  TORCH_CHECK(rc == chorusSuccess, "chorus: ", what, " failed: ", lastError());
}

chorusDataType_t dataType(const at::Tensor& t, const char* where) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return chorusFloat32;
    case at::kDouble:
      return chorusFloat64;
    case at::kHalf:
      return chorusFloat16;
    case at::kBFloat16:
      return chorusBfloat16;
    case at::kChar:
      return chorusInt8;
    case at::kByte:
    case at::kBool:  // one byte, 0 or 1; reductions are chosen so the result stays 0 or 1
      return chorusUint8;
    case at::kInt:
      return chorusInt32;
    case at::kLong:
      return chorusInt64;
    default:
      TORCH_CHECK(false, "chorus: ", where, " does not support tensors of type ", t.scalar_type(),
                  "; it takes float32, float64, float16, bfloat16, int8, uint8, int32, int64 and bool");
  }
}

// `views`: the call stages a tensor that is not contiguous (Dense, below).
void checkTensor(const at::Tensor& t, const char* where, bool views = false) {
  TORCH_CHECK(t.device().is_cpu(), "chorus: ", where, " takes CPU tensors; this one is on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "chorus: ", where, ": unsupported layout ", t.layout(),
              " (it takes dense tensors)");
  TORCH_CHECK(views || t.is_contiguous(), "chorus: ", where, " takes contiguous tensors (call .contiguous())");
  (void)dataType(t, where);
}

// `list`: "input " or "output " where the call has both, for gloo's words ("requires a
// single-element input tensor list", for an empty list too).
const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* where, bool views = false,
                         const char* list = "") {
  TORCH_CHECK(*list || !ts.empty(), "chorus: ", where, " requires non-empty tensor list");
  TORCH_CHECK(ts.size() == 1, "chorus: ", where, " requires a single-element ", list, "tensor list (got ", ts.size(),
              ")");
  checkTensor(ts[0], where, views);
  return ts[0];
}

// Several tensors of one rank in one call (gloo takes them in allreduce, broadcast and allgather):
// each of the first's layout, type and sizes, checked in c10d's words (assertLayoutMatch,
// assertTypeMatch, assertSizesMatch; the index is the tensor's own in the list).
// Tensors `from` on of `ts` like `like` (layout, type and device, sizes), each named by its own index.
void checkLike(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* where, size_t from = 0) {
  for (size_t i = from; i < ts.size(); ++i) {
    TORCH_CHECK(ts[i].layout() == like.layout(), "chorus: ", where, ": invalid tensor layout at index ", i,
                " (expected ", like.layout(), ", got ", ts[i].layout(), ")");
    TORCH_CHECK(ts[i].scalar_type() == like.scalar_type() && ts[i].device() == like.device(), "chorus: ", where,
                ": invalid tensor type at index ", i, " (expected ", like.scalar_type(), " on ", like.device(),
                ", got ", ts[i].scalar_type(), " on ", ts[i].device(), ")");
    TORCH_CHECK(ts[i].sizes() == like.sizes(), "chorus: ", where, ": invalid tensor size at index ", i, " (expected ",
                like.sizes(), ", got ", ts[i].sizes(), ")");
  }
}

void checkAlike(const std::vector<at::Tensor>& ts, const char* where, bool dense = true) {
  TORCH_CHECK(!ts.empty(), "chorus: ", where, " requires non-empty tensor list");
  checkLike(ts, ts[0], where, 1);
  if (dense) {
    for (const at::Tensor& t : ts) checkTensor(t, where, /*views=*/true);
  }
}

// Whether two of the (contiguous) tensors share memory: the same tensor twice, or overlapping views.
bool anyOverlap(const std::vector<at::Tensor>& ts) {
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto* a = static_cast<const char*>(ts[i].data_ptr());
    const auto* aEnd = a + ts[i].nbytes();
    for (size_t j = i + 1; j < ts.size(); ++j) {
      const auto* b = static_cast<const char*>(ts[j].data_ptr());
      if (a < b + ts[j].nbytes() && b < aEnd) return true;
    }
  }
  return false;
}

// A tensor of a list staged through a flat tensor (packOnStream, unpackAfter): any strides.
void checkSame(const at::Tensor& a, const at::Tensor& b, const char* where) {
  checkTensor(b, where, /*views=*/true);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "chorus: ", where, ": tensors of types ", a.scalar_type(), " and ",
              b.scalar_type(), " must be of one type");
  TORCH_CHECK(a.numel() == b.numel(), "chorus: ", where, ": tensors of ", a.numel(), " and ", b.numel(),
              " elements must be of one size");
}

// `what` names the rank: "broadcast root", "send peer".
void checkRank(int64_t rank, int size, const char* what) {
  TORCH_CHECK(rank >= 0 && rank < size, "chorus: ", what, " ", rank, " is out of range [0, ", size, ")");
}

// A root rank and a root tensor, checked as ProcessGroupGloo does (c10d's assertRootRank and
// assertRootTensor), with its words: programs and PyTorch's tests match on them. One tensor per
// rank, so the root tensor is 0.
void checkRoot(int64_t rank, int size, const char* what) {
  TORCH_CHECK(rank >= 0 && rank < size, "chorus: ", what, ": invalid root rank: ", rank, " (the group has ", size,
              " ranks)");
}

void checkRootTensor(int64_t index, size_t count, const char* what) {
  TORCH_CHECK(index >= 0 && static_cast<size_t>(index) < count, "chorus: ", what, ": invalid root tensor: ", index,
              " (the list holds ", count, ")");
}

// All-gather: the output holds world size x the input's elements (reduce-scatter: the input holds
// world size x the output's).
void checkGatherPair(const at::Tensor& output, const at::Tensor& input, int size, bool gather, const char* where) {
  checkTensor(input, where);
  checkTensor(output, where);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: ", where, ": output and input types differ");
  const at::Tensor& whole = gather ? output : input;
  const at::Tensor& part = gather ? input : output;
  TORCH_CHECK(whole.numel() == size * part.numel(), "chorus: ", where, ": the ", gather ? "output" : "input", " has ",
              whole.numel(), " elements, not world size x ", gather ? "input" : "output", " (", size * part.numel(),
              ")");
}

// A root's list of one tensor per rank, each like `like`; `which` ("input" or "output") for gloo's
// words ("Incorrect output list size 2. Output list size should be 3, ...", "invalid tensor type at
// index i", "invalid tensor size at index i").
void checkList(const std::vector<at::Tensor>& list, const at::Tensor& like, int size, const char* where,
               const char* which) {
  const std::string Which = std::string(1, static_cast<char>(std::toupper(which[0]))) + (which + 1);
  TORCH_CHECK(static_cast<int>(list.size()) == size, "chorus: ", where, ": Incorrect ", which, " list size ",
              list.size(), ". ", Which, " list size should be ", size, ", same as size of the process group.");
  checkLike(list, like, where);
  for (const at::Tensor& t : list) checkTensor(t, where, /*views=*/true);  // staged through a flat tensor
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::BAND:
      return "ReduceOp.BAND";
    case c10d::ReduceOp::BOR:
      return "ReduceOp.BOR";
    case c10d::ReduceOp::BXOR:
      return "ReduceOp.BXOR";
    case c10d::ReduceOp::SUM:
      return "ReduceOp.SUM";
    case c10d::ReduceOp::PRODUCT:
      return "ReduceOp.PRODUCT";
    case c10d::ReduceOp::MIN:
      return "ReduceOp.MIN";
    case c10d::ReduceOp::MAX:
      return "ReduceOp.MAX";
    case c10d::ReduceOp::AVG:
      return "ReduceOp.AVG";
    case c10d::ReduceOp::PREMUL_SUM:
      return "ReduceOp.PREMUL_SUM";
    default:
      return "this ReduceOp";
  }
}

// What the stream's host function does after the operation.
// Copies that run on the stream's thread write tensors the caller made: under the caller's
// torch.inference_mode() those are inference tensors, which only code in inference mode may
// update, so the copies run in the mode the caller was in when it made the call.
struct Completion {
  c10::intrusive_ptr<WorkChorus> work;
  std::function<void()> after;
  chorusComm_t comm;
  chorusRedOp_t customOp;
  const char* name;  // a literal
  bool inference = c10::InferenceMode::is_enabled();

  static void run(void* p) {
    std::unique_ptr<Completion> c(static_cast<Completion*>(p));
    std::exception_ptr error;
    chorusResult_t state = chorusSuccess;
    if (chorusCommGetAsyncError(c->comm, &state) != chorusSuccess) {
      error = std::make_exception_ptr(std::runtime_error(std::string("chorus: ") + c->name + ": " + lastError()));
    } else if (state != chorusSuccess && state != chorusInProgress) {
      error =
          std::make_exception_ptr(std::runtime_error(std::string("chorus: ") + c->name + " failed: " + lastError()));
    } else if (c->after) {
      try {
        c10::InferenceMode mode(c->inference);
        c->after();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (c->customOp != chorusNumOps) (void)chorusRedOpDestroy(c->customOp, c->comm);
    c->work->complete(error);
  }
};

struct Before {
  std::function<void()> fn;
  bool inference = c10::InferenceMode::is_enabled();  // as Completion's
  static void run(void* p) {
    std::unique_ptr<Before> b(static_cast<Before*>(p));
    c10::InferenceMode mode(b->inference);
    b->fn();  // copies between tensors the caller validated; nothing here throws
  }
};

// Queues `fn` (copies between tensors the caller validated) on the stream, ahead of what the call
// queues next.
chorusResult_t queueBefore(chorusStream_t stream, std::function<void()> fn) {
  auto* b = new Before{std::move(fn)};
  const chorusResult_t rc = chorusLaunchHostFunc(stream, &Before::run, b);
  if (rc != chorusSuccess) delete b;
  return rc;
}

// The tensor of a call that reads and writes one tensor in place, as Chorus takes it: the caller's
// own when contiguous; else (a view such as t[:, 0], which gloo takes) a contiguous copy, filled
// from the caller's on the stream before the operation and copied back after it.
struct Dense {
  at::Tensor user, work;
  explicit Dense(const at::Tensor& t)
      : user(t),
        work(t.is_contiguous() ? t : at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous))) {}
  bool staged() const { return !work.is_same(user); }
  // Queues the fill on the stream (nothing when not staged).
  chorusResult_t fill(chorusStream_t stream) const {
    if (!staged()) return chorusSuccess;
    return queueBefore(stream, [u = user, w = work]() mutable { w.copy_(u); });
  }
  // The copy back, for the completion (none when not staged).
  std::function<void()> copyBack() const {
    if (!staged()) return nullptr;
    return [u = user, w = work]() mutable { u.copy_(w); };
  }
  std::vector<at::Tensor> keep() const {
    return staged() ? std::vector<at::Tensor>{user, work} : std::vector<at::Tensor>{user};
  }
};

// acc = acc OP x, in place, as the reduction `kind` takes this rank's several tensors: AVG and
// PREMUL_SUM sum them (Chorus divides or multiplies once, across ranks); bool sums are logical or.
void reduceInto(at::Tensor& acc, const at::Tensor& x, c10d::ReduceOp::RedOpType kind) {
  switch (kind) {
    case c10d::ReduceOp::PRODUCT:
      acc.mul_(x);
      return;
    case c10d::ReduceOp::MIN:
      at::minimum_out(acc, acc, x);
      return;
    case c10d::ReduceOp::MAX:
      at::maximum_out(acc, acc, x);
      return;
    case c10d::ReduceOp::BAND:
      acc.bitwise_and_(x);
      return;
    case c10d::ReduceOp::BOR:
      acc.bitwise_or_(x);
      return;
    case c10d::ReduceOp::BXOR:
      acc.bitwise_xor_(x);
      return;
    default:
      acc.add_(x);
      return;
  }
}

// Queues the copy of `parts` into the flat staging tensor (one after another, in order) on the
// stream, so it reads the parts after the work queued before it.
chorusResult_t packOnStream(chorusStream_t stream, std::vector<at::Tensor> parts, at::Tensor flat) {
  return queueBefore(stream, [parts, flat]() mutable {
    int64_t at = 0;
    for (const at::Tensor& p : parts) {
      flat.narrow(0, at, p.numel()).view(p.sizes()).copy_(p);  // any strides
      at += p.numel();
    }
  });
}

// The copy out of the flat staging tensor (the parts one after another) into `parts`, for after
// the operation.
std::function<void()> unpackAfter(std::vector<at::Tensor> parts, at::Tensor flat) {
  return [parts, flat]() mutable {
    int64_t at = 0;
    for (at::Tensor& p : parts) {
      p.copy_(flat.narrow(0, at, p.numel()).view(p.sizes()));  // any strides
      at += p.numel();
    }
  };
}

// An all-gather's output list or a reduce-scatter's input list: one tensor per rank, all of
// `like`'s type, this rank's of `like`'s size; their sizes. Lists of several sizes run as the
// v-collectives (chorusAllGatherV, chorusReduceScatterV), as ProcessGroupNCCL takes them.
std::vector<size_t> listCounts(const std::vector<at::Tensor>& list, const at::Tensor& like, int size, int rank,
                               const char* where, bool gather) {
  // gloo's words (allgather: "invalid output tensor list", reduce_scatter: "invalid input tensor
  // list size"), which programs and PyTorch's tests match on.
  TORCH_CHECK(static_cast<int>(list.size()) == size, "chorus: ", where,
              gather ? ": invalid output tensor list at index 0 (expected length "
                     : ": invalid input tensor list size, must be world size (",
              size, ", got ", list.size(), gather ? ")" : " tensors)");
  std::vector<size_t> counts;
  for (size_t i = 0; i < list.size(); ++i) {
    const at::Tensor& t = list[i];
    checkTensor(t, where, /*views=*/true);  // staged through a flat tensor
    TORCH_CHECK(t.scalar_type() == like.scalar_type(), "chorus: ", where, ": invalid tensor type at index ", i,
                " (expected ", like.scalar_type(), ", got ", t.scalar_type(), ")");
    counts.push_back(static_cast<size_t>(t.numel()));
  }
  TORCH_CHECK(counts[rank] == static_cast<size_t>(like.numel()), "chorus: ", where, ": invalid tensor size at index ",
              rank, " (this rank's tensor in the list has ", counts[rank], " elements, its own tensor ", like.numel(),
              "; the others may differ, as ProcessGroupNCCL takes them)");
  return counts;
}

bool evenCounts(const std::vector<size_t>& counts) {
  return std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
}

// The list a rooted call takes at the root (one tensor like `like` per rank) and the flat staging
// tensor for it; elsewhere no list (and an undefined staging tensor).
// `which`: "output" (gather) or "input" (scatter), for gloo's words.
std::pair<std::vector<at::Tensor>, at::Tensor> rootList(const std::vector<std::vector<at::Tensor>>& lists,
                                                        const at::Tensor& like, bool atRoot, int size,
                                                        const char* where, const char* which) {
  if (!atRoot) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "chorus: ", where, ": requires empty ", which,
                " on non-root");
    return {};
  }
  TORCH_CHECK(lists.size() == 1, "chorus: ", where, ": requires a single-element ", which,
              " list containing a list with ", size, " tensors (got ", lists.size(), " lists)");
  checkList(lists[0], like, size, where, which);
  return {lists[0], at::empty({size * like.numel()}, like.options())};
}

// Tensors an operation reads or writes, kept alive until it is over.
std::vector<at::Tensor> keepAll(std::vector<at::Tensor> keep, const at::Tensor& flat,
                                const std::vector<at::Tensor>& more) {
  if (flat.defined()) keep.push_back(flat);
  keep.insert(keep.end(), more.begin(), more.end());
  return keep;
}

// Issues op(0) .. op(n - 1) as one Chorus group, stopping at the first failure; the group is
// closed either way and its first error returned.
chorusResult_t inGroup(size_t n, const std::function<chorusResult_t(size_t)>& op) {
  chorusResult_t rc = chorusGroupStart();
  for (size_t i = 0; i < n && rc == chorusSuccess; ++i) rc = op(i);
  const chorusResult_t end = chorusGroupEnd();
  return rc != chorusSuccess ? rc : end;
}

}  // namespace

WorkChorus::WorkChorus(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                       std::vector<at::Tensor> keepAlive, std::vector<std::vector<at::Tensor>> lists)
    : Work(rank, type, name),
      outputs_(std::move(outputs)),
      lists_(std::move(lists)),
      keepAlive_(std::move(keepAlive)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          lists_.empty() ? c10::ListType::create(c10::TensorType::get())
                         : c10::ListType::create(c10::ListType::create(c10::TensorType::get())))) {}

int WorkChorus::sourceRank() const {
  TORCH_CHECK(source_ >= 0, "chorus: sourceRank() is known only for a completed recv from any source");
  return source_;
}

void WorkChorus::complete(std::exception_ptr error) {
  // The future first: a thread woken by finish() may read it at once.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(lists_.empty() ? c10::IValue(outputs_) : c10::IValue(lists_));
  }
  keepAlive_.clear();
  finish(error);
}

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), store_(store) {
  // Rank 0 makes the unique id (its bootstrap root listens on a port of its own, not on the
  // store's) and publishes it; the store's get waits for it.
  const std::string key = "chorus_torch/unique_id";
  chorusUniqueId id;
  if (rank == 0) {
    check(chorusGetUniqueId(&id), "chorusGetUniqueId");
    const auto* b = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(b, b + sizeof(id)));
  } else {
    const std::vector<uint8_t> v = store->get(key);
    TORCH_CHECK(v.size() == sizeof(id), "chorus: the store's ", key, " holds ", v.size(), " bytes, not a unique id");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.timeoutSeconds = static_cast<int>(std::max<int64_t>(1, (timeout.count() + 999) / 1000));
  check(chorusCommInitRankConfig(&comm_, size, id, rank, &config), "initialising the communicator");
  check(chorusStreamCreate(&stream_), "creating the stream");
}

ProcessGroupChorus::~ProcessGroupChorus() {
  // The last reference may be dropped from C++ with the GIL held (DDP's reducer going away with
  // its module). The stream's host functions free tensors whose Python objects need the GIL, so
  // waiting for the stream with it held would never end.
  std::optional<pybind11::gil_scoped_release> release;
  if (Py_IsInitialized() && PyGILState_Check()) release.emplace();
  if (stream_) (void)chorusStreamDestroy(stream_);  // waits for what is queued
  if (comm_) (void)chorusCommDestroy(comm_);
}

void ProcessGroupChorus::shutdown() {
  std::optional<pybind11::gil_scoped_release> release;
  if (Py_IsInitialized() && PyGILState_Check()) release.emplace();
  // A failed operation already failed its Work; here only the waiting matters.
  if (stream_) (void)chorusStreamSynchronize(stream_);
}

chorusRedOp_t ProcessGroupChorus::redOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* collective) {
  const bool isBool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return isBool ? chorusMax : chorusSum;  // logical or, as ProcessGroupNCCL
    case c10d::ReduceOp::PRODUCT:
      return isBool ? chorusMin : chorusProd;  // logical and
    case c10d::ReduceOp::MIN:
      return chorusMin;
    case c10d::ReduceOp::MAX:
      return chorusMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!isBool, "chorus: cannot use ReduceOp.AVG with boolean inputs");
      return chorusAvg;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(!isBool, "chorus: cannot use ReduceOp.PREMUL_SUM with boolean inputs");
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, "chorus: ReduceOp.PREMUL_SUM without its factor (make it with _make_nccl_premul_sum)");
      // The factor in the tensor's own type, read by Chorus at creation.
      at::Tensor factor = s->tensor_factor.defined() ? s->tensor_factor.to(at::kCPU).to(t.scalar_type()).reshape({})
                                                     : at::scalar_tensor(s->double_factor, t.options());
      chorusRedOp_t custom;
      check(chorusRedOpCreatePreMulSum(&custom, factor.data_ptr(), dataType(t, collective), chorusScalarHostImmediate,
                                       comm_),
            "making the PREMUL_SUM operator");
      return custom;
    }
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      // Integers and bool (as one byte each: 0 and 1 stay 0 and 1), as ProcessGroupGloo.
      TORCH_CHECK(!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type()), "chorus: Cannot use ",
                  opName(op.op_), " with non-integral dtype (", collective, " of ", t.scalar_type(), ")");
      return op.op_ == c10d::ReduceOp::BAND ? chorusBand : op.op_ == c10d::ReduceOp::BOR ? chorusBor : chorusBxor;
    default:
      TORCH_CHECK(false, "chorus: cannot use ", opName(op.op_), " with Chorus (", collective,
                  " supports SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM, and BAND, BOR, BXOR on integers)");
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::launch(c10d::OpType type, const char* name,
                                                          std::vector<at::Tensor> outputs,
                                                          std::vector<at::Tensor> keepAlive,
                                                          const std::function<chorusResult_t()>& issue,
                                                          std::function<void()> after, chorusRedOp_t customOp,
                                                          int** source, std::vector<std::vector<at::Tensor>> lists) {
  auto work =
      c10::make_intrusive<WorkChorus>(rank_, type, name, std::move(outputs), std::move(keepAlive), std::move(lists));
  if (source) *source = work->sourceSlot();
  std::lock_guard<std::mutex> g(launchMu_);
  if (type != c10d::OpType::SEND && type != c10d::OpType::RECV && type != c10d::OpType::RECVANYSOURCE) ++seq_;
  const chorusResult_t rc = issue();
  if (rc != chorusSuccess) {
    const std::string why = lastError();
    if (customOp != chorusNumOps) (void)chorusRedOpDestroy(customOp, comm_);
    TORCH_CHECK(false, "chorus: ", name, " failed: ", why);
  }
  auto* c = new Completion{work, std::move(after), comm_, customOp, name};
  if (coalescing_) {
    coalesced_.push_back(c);  // queued after the group, at endCoalescing
    return work;
  }
  if (chorusLaunchHostFunc(stream_, &Completion::run, c) != chorusSuccess) {
    const std::string why = lastError();
    delete c;
    TORCH_CHECK(false, "chorus: ", name, ": queueing its completion failed: ", why);
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  // In gloo's order: the root, the root tensor (of an empty list too), then the tensor.
  checkRoot(opts.rootRank, size_, "broadcast");
  checkRootTensor(opts.rootTensor, tensors.size(), "broadcast");
  // Several tensors of this rank, as gloo takes them: the root's tensor rootTensor goes to every
  // rank, into every one of its tensors (the root's own others too).
  checkAlike(tensors, "broadcast");
  const Dense d(tensors[opts.rootTensor]);
  const at::Tensor& t = d.work;
  std::vector<at::Tensor> keep = d.keep();
  keep.insert(keep.end(), tensors.begin(), tensors.end());
  std::function<void()> after = d.copyBack();
  if (tensors.size() > 1) {
    after = [user = tensors, work = d.work]() mutable {
      for (at::Tensor& u : user) u.copy_(work);
    };
  }
  return launch(
      c10d::OpType::BROADCAST, "broadcast", tensors, keep,
      [&] {
        if (chorusResult_t rc = d.fill(stream_); rc != chorusSuccess) return rc;
        return chorusBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), dataType(t, "broadcast"),
                               static_cast<int>(opts.rootRank), comm_, stream_);
      },
      std::move(after));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  if (!tensors.empty() && tensors[0].layout() == at::kSparse) return allreduceSparse(tensors, opts);
  if (tensors.size() > 1) return allreduceMany(tensors, opts);
  const Dense d(single(tensors, "allreduce", /*views=*/true));
  const at::Tensor& t = d.work;
  const chorusRedOp_t op = redOp(opts.reduceOp, t, "allreduce");
  return launch(
      c10d::OpType::ALLREDUCE, "allreduce", tensors, d.keep(),
      [&] {
        if (chorusResult_t rc = d.fill(stream_); rc != chorusSuccess) return rc;
        return chorusAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dataType(t, "allreduce"), op, comm_, stream_);
      },
      d.copyBack(), op >= chorusNumOps ? op : chorusNumOps);
}

// Several tensors of this rank, as gloo takes them: the reduction over every rank's tensors, all of
// them, written to each. This rank's are reduced into one contiguous tensor on the stream (after
// the work queued before, which may write them), that one is all-reduced, and copied to each.
// AVG divides the whole once by the world size, into every tensor (gloo divides only the first).
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduceMany(std::vector<at::Tensor>& tensors,
                                                                 const c10d::AllreduceOptions& opts) {
  checkAlike(tensors, "allreduce");
  const chorusRedOp_t op = redOp(opts.reduceOp, tensors[0], "allreduce");
  at::Tensor acc = at::empty(tensors[0].sizes(), tensors[0].options().memory_format(at::MemoryFormat::Contiguous));
  std::vector<at::Tensor> parts = tensors;
  return launch(
      c10d::OpType::ALLREDUCE, "allreduce", tensors, keepAll(parts, acc, {}),
      [&] {
        const chorusResult_t rc = queueBefore(stream_, [parts, acc, kind = opts.reduceOp.op_]() mutable {
          acc.copy_(parts[0]);
          for (size_t i = 1; i < parts.size(); ++i) reduceInto(acc, parts[i], kind);
        });
        if (rc != chorusSuccess) return rc;
        return chorusAllReduce(acc.data_ptr(), acc.data_ptr(), acc.numel(), dataType(acc, "allreduce"), op, comm_,
                               stream_);
      },
      [parts, acc]() mutable {
        for (at::Tensor& p : parts) p.copy_(acc);
      },
      op >= chorusNumOps ? op : chorusNumOps);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                                    const c10d::AllreduceOptions& opts) {
  return allreduceSparse(tensors, opts);
}

void ProcessGroupChorus::runNow(const char* name, const std::function<chorusResult_t()>& issue) {
  {
    std::lock_guard<std::mutex> g(launchMu_);
    TORCH_CHECK(!coalescing_, "chorus: ", name, " cannot be part of a coalesced group");
    TORCH_CHECK(issue() == chorusSuccess, "chorus: ", name, " failed: ", lastError());
  }
  TORCH_CHECK(chorusStreamSynchronize(stream_) == chorusSuccess, "chorus: ", name, " failed: ", lastError());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduceSparse(std::vector<at::Tensor>& tensors,
                                                                   const c10d::AllreduceOptions& opts) {
  const char* name = "allreduce (sparse)";
  checkAlike(tensors, name, /*dense=*/false);
  // Several tensors of this rank: their sum takes part, and every one of them gets the result.
  at::Tensor t = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i) t = t + tensors[i];
  TORCH_CHECK(t.device().is_cpu(), "chorus: ", name, " takes CPU tensors; this one is on ", t.device());
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "chorus: ", name,
              ": unsupported reduction operation (allreduce of sparse tensors only works with ReduceOp.SUM, as "
              "gloo's; not ",
              opName(opts.reduceOp.op_), ")");
  constexpr int64_t kMaxDims = 8;
  TORCH_CHECK(t.dim() <= kMaxDims, "chorus: ", name, " takes tensors of up to ", kMaxDims, " dimensions");
  const at::Tensor in = t.coalesce();
  const at::Tensor indices = in.indices().contiguous();  // [sparse dims, nnz], int64
  const at::Tensor values = in.values().contiguous();    // [nnz, dense sizes...]
  const chorusDataType_t type = dataType(values, name);
  const int64_t nnz = in._nnz();
  const int64_t sparseDims = in.sparse_dim();
  int64_t rowElems = 1;  // elements of one value: the product of the dense sizes
  for (int64_t d = sparseDims; d < t.dim(); ++d) rowElems *= t.size(d);

  // First every rank's count and shape (nnz, sparse dims, dims, sizes, -1 after them), all-gathered:
  // the shapes must agree, and the largest count sizes the second gather.
  constexpr int64_t kMeta = 3 + kMaxDims;
  at::Tensor meta = at::full({kMeta}, -1, at::kLong);
  auto m = meta.accessor<int64_t, 1>();
  m[0] = nnz;
  m[1] = sparseDims;
  m[2] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) m[3 + d] = t.size(d);
  at::Tensor metas = at::empty({size_, kMeta}, at::kLong);
  runNow(name, [&] { return chorusAllGather(meta.data_ptr(), metas.data_ptr(), kMeta, chorusInt64, comm_, stream_); });
  int64_t most = 0;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(metas[r].narrow(0, 1, kMeta - 1).equal(meta.narrow(0, 1, kMeta - 1)), "chorus: ", name, ": rank ", r,
                "'s sparse tensor has another shape or number of sparse dimensions than rank ", rank_, "'s ",
                t.sizes());
    most = std::max(most, metas[r][0].item<int64_t>());
  }

  // Then the indices and values, each rank's padded to the largest count, in one group.
  at::Tensor myIndices = at::zeros({sparseDims, most}, at::kLong);
  at::Tensor myValues = at::zeros({most * rowElems}, values.options());
  myIndices.narrow(1, 0, nnz).copy_(indices);
  myValues.narrow(0, 0, nnz * rowElems).copy_(values.view({-1}));
  at::Tensor allIndices = at::empty({size_, sparseDims, most}, at::kLong);
  at::Tensor allValues = at::empty({size_ * most * rowElems}, values.options());
  runNow(name, [&] {
    return inGroup(2, [&](size_t i) {
      return i == 0 ? chorusAllGather(myIndices.data_ptr(), allIndices.data_ptr(), sparseDims * most, chorusInt64,
                                      comm_, stream_)
                    : chorusAllGather(myValues.data_ptr(), allValues.data_ptr(), most * rowElems, type, comm_, stream_);
    });
  });

  // Every rank's entries side by side, summed where they meet by coalescing.
  std::vector<at::Tensor> gatheredIndices, gatheredValues;
  std::vector<int64_t> valueShape(values.sizes().begin(), values.sizes().end());
  for (int r = 0; r < size_; ++r) {
    const int64_t count = metas[r][0].item<int64_t>();
    gatheredIndices.push_back(allIndices[r].narrow(1, 0, count));
    valueShape[0] = count;
    gatheredValues.push_back(allValues.narrow(0, r * most * rowElems, count * rowElems).view(valueShape));
  }
  at::Tensor sum = at::sparse_coo_tensor(at::cat(gatheredIndices, 1), at::cat(gatheredValues, 0), t.sizes(),
                                         values.options().layout(at::kSparse))
                       .coalesce();
  for (at::Tensor& each : tensors) each.copy_(sum);
  ++seq_;
  auto work = c10::make_intrusive<WorkChorus>(rank_, c10d::OpType::ALLREDUCE, name, tensors, std::vector<at::Tensor>{});
  work->complete(nullptr);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "chorus: allreduce_coalesced requires non-empty tensor list");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    TORCH_CHECK(t.layout() == tensors[0].layout(), "chorus: allreduce_coalesced: invalid tensor layout at index ", i,
                " (expected ", tensors[0].layout(), ", got ", t.layout(), ")");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "chorus: allreduce_coalesced: tensors must all have the same type (", tensors[0].scalar_type(), " and ",
                t.scalar_type(), ")");
    TORCH_CHECK(t.device() == tensors[0].device(),
                "chorus: allreduce_coalesced: tensors must all be on the same device");
    checkTensor(t, "allreduce_coalesced");
  }
  const chorusRedOp_t op = redOp(opts.reduceOp, tensors[0], "allreduce_coalesced");
  if (anyOverlap(tensors)) {
    // A tensor twice in the list (or views that share elements) must be reduced once, as gloo
    // does: the list is packed into one flat tensor, reduced, and copied back to every entry.
    int64_t total = 0;
    for (const at::Tensor& t : tensors) total += t.numel();
    at::Tensor flat = at::empty({total}, tensors[0].options());
    std::vector<at::Tensor> parts = tensors;
    return launch(
        c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, keepAll(parts, flat, {}),
        [&] {
          if (chorusResult_t rc = packOnStream(stream_, parts, flat); rc != chorusSuccess) return rc;
          return chorusAllReduce(flat.data_ptr(), flat.data_ptr(), total, dataType(flat, "allreduce_coalesced"), op,
                                 comm_, stream_);
        },
        unpackAfter(parts, flat), op >= chorusNumOps ? op : chorusNumOps);
  }
  return launch(
      c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, tensors,
      [&] {
        return inGroup(tensors.size(), [&](size_t i) {
          const at::Tensor& t = tensors[i];
          return chorusAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dataType(t, "allreduce_coalesced"), op, comm_,
                                 stream_);
        });
      },
      nullptr, op >= chorusNumOps ? op : chorusNumOps);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  checkRoot(opts.rootRank, size_, "reduce");
  checkRootTensor(opts.rootTensor, tensors.size(), "reduce");
  const Dense d(single(tensors, "reduce", /*views=*/true));
  const at::Tensor& t = d.work;
  const chorusRedOp_t op = redOp(opts.reduceOp, t, "reduce");
  return launch(
      c10d::OpType::REDUCE, "reduce", tensors, d.keep(),
      [&] {
        if (chorusResult_t rc = d.fill(stream_); rc != chorusSuccess) return rc;
        return chorusReduce(t.data_ptr(), t.data_ptr(), t.numel(), dataType(t, "reduce"), op,
                            static_cast<int>(opts.rootRank), comm_, stream_);
      },
      d.copyBack(), op >= chorusNumOps ? op : chorusNumOps);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions&) {
  TORCH_CHECK(!inputs.empty(), "chorus: allgather requires non-empty input tensor list");
  if (inputs.size() > 1) return allgatherMany(outputs, inputs);
  const Dense d(single(inputs, "allgather", /*views=*/true));
  const at::Tensor& in = d.work;
  TORCH_CHECK(outputs.size() == 1,
              "chorus: allgather requires input/output tensor lists to have the same length (1 "
              "input, ",
              outputs.size(), " output lists)");
  const std::vector<size_t> counts = listCounts(outputs[0], in, size_, rank_, "allgather", /*gather=*/true);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, in.options());
  const std::vector<at::Tensor>& outs = outputs[0];
  const size_t n = static_cast<size_t>(in.numel());
  return launch(
      c10d::OpType::ALLGATHER, "allgather", outs, keepAll(d.keep(), flat, outs),
      [&] {
        if (chorusResult_t rc = d.fill(stream_); rc != chorusSuccess) return rc;
        const chorusDataType_t t = dataType(in, "allgather");
        return evenCounts(counts)
                   ? chorusAllGather(in.data_ptr(), flat.data_ptr(), n, t, comm_, stream_)
                   : chorusAllGatherV(in.data_ptr(), n, flat.data_ptr(), counts.data(), nullptr, t, comm_, stream_);
      },
      unpackAfter(outs, flat));
}

// Several inputs of this rank (k), as gloo takes them: k output lists, each of k x world size
// tensors, all alike; entry j of every list is input j % k of rank j / k.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgatherMany(std::vector<std::vector<at::Tensor>>& outputs,
                                                                 std::vector<at::Tensor>& inputs) {
  const char* name = "allgather";
  checkAlike(inputs, name);
  const size_t k = inputs.size();
  TORCH_CHECK(outputs.size() == k, "chorus: ", name, " requires input/output tensor lists to have the same length (", k,
              " inputs, ", outputs.size(), " output lists)");
  std::vector<at::Tensor> outs;
  for (size_t g = 0; g < k; ++g) {
    TORCH_CHECK(outputs[g].size() == k * size_, "chorus: ", name, ": invalid output tensor list at index ", g,
                " (expected length ", k * size_, ", got ", outputs[g].size(), ")");
    checkLike(outputs[g], inputs[0], name);
    for (const at::Tensor& t : outputs[g]) checkTensor(t, name, /*views=*/true);  // unpacked by copies
    outs.insert(outs.end(), outputs[g].begin(), outputs[g].end());
  }
  const int64_t n = inputs[0].numel();
  at::Tensor flatIn = at::empty({static_cast<int64_t>(k) * n}, inputs[0].options());
  at::Tensor flatOut = at::empty({static_cast<int64_t>(k) * size_ * n}, inputs[0].options());
  std::vector<at::Tensor> ins = inputs;
  std::vector<std::vector<at::Tensor>> lists = outputs;
  return launch(
      c10d::OpType::ALLGATHER, name, outs, keepAll(keepAll(ins, flatIn, outs), flatOut, {}),
      [&]() -> chorusResult_t {
        if (chorusResult_t rc = packOnStream(stream_, ins, flatIn); rc != chorusSuccess) return rc;
        return chorusAllGather(flatIn.data_ptr(), flatOut.data_ptr(), flatIn.numel(), dataType(flatIn, name), comm_,
                               stream_);
      },
      [lists, flatOut]() mutable {
        for (const std::vector<at::Tensor>& list : lists) unpackAfter(list, flatOut)();
      },
      chorusNumOps, nullptr, lists);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  checkGatherPair(output, input, size_, true, "_allgather_base");
  return launch(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output}, {input, output}, [&] {
    return chorusAllGather(input.data_ptr(), output.data_ptr(), input.numel(), dataType(input, "_allgather_base"),
                           comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                   std::vector<at::Tensor>& inputs,
                                                                                   const c10d::AllgatherOptions&) {
  const char* name = "allgather_into_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size(), "chorus: ", name, ": ", outputs.size(), " outputs for ", inputs.size(),
              " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) checkGatherPair(outputs[i], inputs[i], size_, true, name);
  std::vector<at::Tensor> keep = inputs;
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  return launch(c10d::OpType::COALESCED, name, outputs, keep, [&] {
    return inGroup(inputs.size(), [&](size_t i) {
      return chorusAllGather(inputs[i].data_ptr(), outputs[i].data_ptr(), inputs[i].numel(), dataType(inputs[i], name),
                             comm_, stream_);
    });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::GatherOptions& opts) {
  checkRoot(opts.rootRank, size_, "gather");  // gloo's order: the root first
  const Dense d(single(inputs, "gather", /*views=*/true, "input "));
  const at::Tensor& in = d.work;
  const int root = static_cast<int>(opts.rootRank);
  const int64_t n = in.numel();
  const auto [outs, flat] = rootList(outputs, in, rank_ == root, size_, "gather", "output");
  return launch(
      c10d::OpType::GATHER, "gather", outs, keepAll(d.keep(), flat, outs),
      [&] {
        if (chorusResult_t rc = d.fill(stream_); rc != chorusSuccess) return rc;
        return chorusGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, n, dataType(in, "gather"), root,
                            comm_, stream_);
      },
      unpackAfter(outs, flat));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  checkRoot(opts.rootRank, size_, "scatter");  // gloo's order: the root first
  const Dense d(single(outputs, "scatter", /*views=*/true, "output "));
  const at::Tensor& out = d.work;
  const int root = static_cast<int>(opts.rootRank);
  const int64_t n = out.numel();
  const auto [ins, flat] = rootList(inputs, out, rank_ == root, size_, "scatter", "input");
  return launch(
      c10d::OpType::SCATTER, "scatter", outputs, keepAll(d.keep(), flat, ins),
      [&]() -> chorusResult_t {
        if (flat.defined()) {
          const chorusResult_t rc = packOnStream(stream_, ins, flat);
          if (rc != chorusSuccess) return rc;
        }
        return chorusScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), n, dataType(out, "scatter"),
                             root, comm_, stream_);
      },
      d.copyBack());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  const Dense d(single(outputs, "reduce_scatter", /*views=*/true, "output "));
  const at::Tensor& out = d.work;
  TORCH_CHECK(inputs.size() == 1, "chorus: reduce_scatter requires input/output tensor lists to have the same length (",
              inputs.size(), " input lists)");
  const std::vector<size_t> counts = listCounts(inputs[0], out, size_, rank_, "reduce_scatter", /*gather=*/false);
  const chorusRedOp_t op = redOp(opts.reduceOp, out, "reduce_scatter");
  const size_t n = static_cast<size_t>(out.numel());
  const std::vector<at::Tensor>& ins = inputs[0];
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, out.options());
  return launch(
      c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, keepAll(d.keep(), flat, ins),
      [&]() -> chorusResult_t {
        const chorusResult_t rc = packOnStream(stream_, ins, flat);
        if (rc != chorusSuccess) return rc;
        const chorusDataType_t t = dataType(out, "reduce_scatter");
        return evenCounts(counts) ? chorusReduceScatter(flat.data_ptr(), out.data_ptr(), n, t, op, comm_, stream_)
                                  : chorusReduceScatterV(flat.data_ptr(), counts.data(), nullptr, out.data_ptr(), n, t,
                                                         op, comm_, stream_);
      },
      d.copyBack(), op >= chorusNumOps ? op : chorusNumOps);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  checkGatherPair(output, input, size_, false, "_reduce_scatter_base");
  const chorusRedOp_t op = redOp(opts.reduceOp, output, "_reduce_scatter_base");
  return launch(
      c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, {input, output},
      [&] {
        return chorusReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                                   dataType(output, "_reduce_scatter_base"), op, comm_, stream_);
      },
      nullptr, op >= chorusNumOps ? op : chorusNumOps);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(!outputs.empty(), "chorus: ", name, " needs at least one tensor");
  TORCH_CHECK(outputs.size() == inputs.size(), "chorus: ", name, ": ", outputs.size(), " outputs for ", inputs.size(),
              " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkGatherPair(outputs[i], inputs[i], size_, false, name);
    // One operator serves the group, so one type (PREMUL_SUM's factor is made in it).
    TORCH_CHECK(outputs[i].scalar_type() == outputs[0].scalar_type(), "chorus: ", name, " takes tensors of one type");
  }
  const chorusRedOp_t op = redOp(opts.reduceOp, outputs[0], name);
  std::vector<at::Tensor> keep = inputs;
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  return launch(
      c10d::OpType::COALESCED, name, outputs, keep,
      [&] {
        return inGroup(inputs.size(), [&](size_t i) {
          return chorusReduceScatter(inputs[i].data_ptr(), outputs[i].data_ptr(), outputs[i].numel(),
                                     dataType(outputs[i], name), op, comm_, stream_);
        });
      },
      nullptr, op >= chorusNumOps ? op : chorusNumOps);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& outputSplitSizes,
                                                                 std::vector<int64_t>& inputSplitSizes,
                                                                 const c10d::AllToAllOptions&) {
  // ValueError, in gloo's words: all_to_all_single's callers catch it by type.
  TORCH_CHECK_VALUE(input.layout() != at::kStrided || input.is_contiguous(),
                    "chorus: alltoall_base: Tensors must be contiguous (the input is a view; call .contiguous())");
  checkTensor(input, "alltoall_base");
  checkTensor(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: alltoall_base: output and input types differ");
  const chorusDataType_t type = dataType(input, "alltoall_base");
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0,
                "chorus: alltoall_base: input and output of ", input.numel(), " and ", output.numel(),
                " elements must be equal and divide by the world size ", size_);
    return launch(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output}, {input, output}, [&] {
      return chorusAlltoAll(input.data_ptr(), output.data_ptr(), input.numel() / size_, type, comm_, stream_);
    });
  }
  // Uneven splits along dimension 0: a send and a receive per peer, in one group.
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    std::vector<int64_t> c(size_), off(size_);
    const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    const int64_t row = rows > 0 ? t.numel() / rows : 0;
    int64_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const int64_t s = splits.empty() ? rows / size_ : splits[r];
      c[r] = s * row;
      off[r] = at;
      at += c[r];
    }
    TORCH_CHECK(splits.empty() || static_cast<int>(splits.size()) == size_, "chorus: alltoall_base: ", which,
                " split sizes have ", splits.size(), " entries, not one per rank (", size_, ")");
    TORCH_CHECK(at == t.numel(), "chorus: alltoall_base: ", which, " split sizes cover ", at, " elements of ",
                t.numel());
    return std::make_pair(c, off);
  };
  const auto [sendCount, sendOff] = counts(input, inputSplitSizes, "input");
  const auto [recvCount, recvOff] = counts(output, outputSplitSizes, "output");
  const size_t es = input.element_size();
  return launch(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output}, {input, output}, [&] {
    return inGroup(size_, [&](size_t r) {
      chorusResult_t rc = chorusSuccess;
      if (sendCount[r] > 0) {
        rc = chorusSend(static_cast<char*>(input.data_ptr()) + sendOff[r] * es, sendCount[r], type, int(r), comm_,
                        stream_);
      }
      if (rc == chorusSuccess && recvCount[r] > 0) {
        rc = chorusRecv(static_cast<char*>(output.data_ptr()) + recvOff[r] * es, recvCount[r], type, int(r), comm_,
                        stream_);
      }
      return rc;
    });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "chorus: alltoall takes one input and one output tensor per rank (", size_, "), got ", inputs.size(),
              " and ", outputs.size());
  for (int r = 0; r < size_; ++r) {
    checkTensor(inputs[r], "alltoall");
    checkTensor(outputs[r], "alltoall");
    TORCH_CHECK(
        inputs[r].scalar_type() == inputs[0].scalar_type() && outputs[r].scalar_type() == inputs[0].scalar_type(),
        "chorus: alltoall takes tensors of one type");
  }
  std::vector<at::Tensor> keep = inputs;
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  return launch(c10d::OpType::ALLTOALL, "alltoall", outputs, keep, [&] {
    return inGroup(size_, [&](size_t r) {
      const at::Tensor& in = inputs[r];
      const at::Tensor& out = outputs[r];
      chorusResult_t rc = chorusSuccess;
      if (in.numel() > 0) rc = chorusSend(in.data_ptr(), in.numel(), dataType(in, "alltoall"), int(r), comm_, stream_);
      if (rc == chorusSuccess && out.numel() > 0) {
        rc = chorusRecv(out.data_ptr(), out.numel(), dataType(out, "alltoall"), int(r), comm_, stream_);
      }
      return rc;
    });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dstRank, int) {
  const Dense d(single(tensors, "send", /*views=*/true));
  checkRank(dstRank, size_, "send peer");
  const at::Tensor& t = d.work;
  return launch(c10d::OpType::SEND, "send", tensors, d.keep(), [&] {
    if (chorusResult_t rc = d.fill(stream_); rc != chorusSuccess) return rc;
    return chorusSend(t.data_ptr(), t.numel(), dataType(t, "send"), dstRank, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int srcRank, int) {
  const Dense d(single(tensors, "recv", /*views=*/true));
  checkRank(srcRank, size_, "recv peer");
  const at::Tensor& t = d.work;
  return launch(
      c10d::OpType::RECV, "recv", tensors, d.keep(),
      [&] { return chorusRecv(t.data_ptr(), t.numel(), dataType(t, "recv"), srcRank, comm_, stream_); }, d.copyBack());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors, int) {
  const Dense d(single(tensors, "recv", /*views=*/true));
  const at::Tensor& t = d.work;
  {
    std::lock_guard<std::mutex> g(launchMu_);
    TORCH_CHECK(!coalescing_,
                "chorus: a recv without a source cannot be part of batch_isend_irecv or a coalescing "
                "block (its source is chosen when it runs); give the source");
  }
  int* source = nullptr;
  return launch(
      c10d::OpType::RECVANYSOURCE, "recv", tensors, d.keep(),
      [&] { return chorusRecvAny(t.data_ptr(), t.numel(), dataType(t, "recv"), source, comm_, stream_); }, d.copyBack(),
      chorusNumOps, &source);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions&) {
  at::Tensor one = at::ones({1}, at::kInt);
  return launch(c10d::OpType::BARRIER, "barrier", {}, {one}, [&] {
    return chorusAllReduce(one.data_ptr(), one.data_ptr(), 1, chorusInt32, chorusSum, comm_, stream_);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  // outputLists[r][i] receives rank r's inputs[i]. The inputs are packed into one flat tensor
  // (on the stream, so they are read in stream order), gathered by one all-gather, and unpacked.
  TORCH_CHECK(!inputs.empty(), "chorus: allgather_coalesced requires non-empty tensor list");
  // Gloo's checks and words (ProcessGroupGloo::allgather_coalesced): programs and PyTorch's tests
  // match on them.
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_,
              "chorus: allgather_coalesced: output lists should be equal to world size (", size_, ", got ",
              outputLists.size(), ")");
  int64_t total = 0;
  for (const at::Tensor& t : inputs) {
    checkTensor(t, "allgather_coalesced");
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(), "chorus: allgather_coalesced takes inputs of one type");
    total += t.numel();
  }
  std::vector<at::Tensor> outs;
  for (const auto& list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(), "chorus: allgather_coalesced: invalid output size: (expected length ",
                inputs.size(), ", got ", list.size(), ")");
    for (size_t i = 0; i < list.size(); ++i) {
      TORCH_CHECK(list[i].sizes() == inputs[i].sizes(),
                  "chorus: allgather_coalesced: invalid size of output tensor at index ", i, " (expected length ",
                  inputs[i].sizes(), ", got ", list[i].sizes(), ")");
      TORCH_CHECK(list[i].options().type_equal(inputs[i].options()),
                  "chorus: allgather_coalesced: invalid tensor type at index ", i, " (expected ", inputs[i].toString(),
                  ", got ", list[i].toString(), ")");
      checkSame(inputs[i], list[i], "allgather_coalesced");
    }
    outs.insert(outs.end(), list.begin(), list.end());
  }
  at::Tensor flatIn = at::empty({total}, inputs[0].options());
  at::Tensor flatOut = at::empty({size_ * total}, inputs[0].options());
  std::vector<at::Tensor> ins = inputs;
  auto unpack = [outs, ins, flatOut, total]() mutable {
    size_t k = 0;
    for (int64_t r = 0; k < outs.size(); ++r) {
      int64_t off = r * total;
      for (const at::Tensor& in : ins) {
        outs[k++].view({-1}).copy_(flatOut.narrow(0, off, in.numel()));
        off += in.numel();
      }
    }
  };
  return launch(
      c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", outs, keepAll(ins, flatIn, {flatOut}),
      [&] {
        if (chorusResult_t rc = packOnStream(stream_, ins, flatIn); rc != chorusSuccess) return rc;
        return chorusAllGather(flatIn.data_ptr(), flatOut.data_ptr(), total, dataType(inputs[0], "allgather_coalesced"),
                               comm_, stream_);
      },
      unpack);
}

void ProcessGroupChorus::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const std::string base = "chorus_torch/monitored_barrier/" + std::to_string(monitoredBarriers_++) + "/";
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(opts.timeout);
  if (rank_ != 0) {
    store_->set(base + std::to_string(rank_), std::vector<uint8_t>{1});
    try {
      store_->wait({base + "done"}, timeout);
    } catch (const std::exception&) {
      TORCH_CHECK(false, "chorus: rank ", rank_, " timed out in monitoredBarrier after ", timeout.count(),
                  " ms waiting for rank 0 (Timed out waiting for rank 0)");
    }
    const std::vector<uint8_t> word = store_->get(base + "done");
    TORCH_CHECK(word.size() == 1 && word[0] == 1,
                "chorus: monitoredBarrier failed at rank 0: ", std::string(word.begin(), word.end()));
    return;
  }
  // Rank 0: every other rank within the timeout, then the word. As gloo's: one deadline for all,
  // and when it has passed before a rank's turn, rank 0 itself timed out; with waitAllRanks each
  // rank gets the whole timeout, so that one absent rank does not hide the next.
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> missing, processed;
  auto join = [](const std::vector<int>& ranks) {
    std::string text;
    for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
    return text;
  };
  auto fail = [&](const std::string& why) {
    store_->set(base + "done", std::vector<uint8_t>(why.begin(), why.end()));
    TORCH_CHECK(false, "chorus: ", why);
  };
  for (int r = 1; r < size_; ++r) {
    const auto left =
        waitAllRanks
            ? timeout
            : timeout - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (left.count() <= 0) {
      fail("Rank 0 timed out in monitoredBarrier after " + std::to_string(timeout.count()) + " ms.\n" +
           (processed.empty() ? std::string("No ranks successfully processed in monitoredBarrier.")
                              : "Successfully processed ranks: " + join(processed)));
    }
    try {
      store_->wait({base + std::to_string(r)}, left);
      processed.push_back(r);
    } catch (const std::exception&) {
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  if (missing.empty()) {
    store_->set(base + "done", std::vector<uint8_t>{1});
    return;
  }
  fail((missing.size() == 1 ? "Rank " : "Ranks ") + join(missing) + " failed to pass monitoredBarrier in " +
       std::to_string(timeout.count()) + " ms (Timed out waiting for them)");
}

void ProcessGroupChorus::startCoalescing() {
  std::lock_guard<std::mutex> g(launchMu_);
  TORCH_CHECK(!coalescing_, "chorus: startCoalescing inside a coalescing block");
  check(chorusGroupStart(), "startCoalescing");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::endCoalescing() {
  auto whole = c10::make_intrusive<WorkChorus>(rank_, c10d::OpType::COALESCED, "coalesced", std::vector<at::Tensor>{},
                                               std::vector<at::Tensor>{});
  std::vector<void*> held;
  chorusResult_t rc;
  std::string why;
  {
    std::lock_guard<std::mutex> g(launchMu_);
    TORCH_CHECK(coalescing_, "chorus: endCoalescing without startCoalescing");
    coalescing_ = false;
    held.swap(coalesced_);
    held.push_back(new Completion{whole, nullptr, comm_, chorusNumOps, "coalesced"});
    // The group's operations go on the stream as one; the Works complete after them.
    rc = chorusGroupEnd();
    if (rc != chorusSuccess) why = lastError();
    for (void* p : held) {
      auto* c = static_cast<Completion*>(p);
      if (rc == chorusSuccess && chorusLaunchHostFunc(stream_, &Completion::run, c) == chorusSuccess) continue;
      const std::string text = "chorus: " + std::string(c->name) + " failed: " + (why.empty() ? lastError() : why);
      c->work->complete(std::make_exception_ptr(std::runtime_error(text)));
      delete c;
    }
  }
  TORCH_CHECK(rc == chorusSuccess, "chorus: the coalesced operations failed: ", why);
  return whole;
}

}  // namespace chorus_torch
