// Custom reduction operators (chorusRedOpCreatePreMulSum) and the reduction a call runs.
#include "src/core/redops.h"

#include <cstring>

#include "src/common/types.h"

namespace chorus {

namespace {

bool isFloating(chorusDataType_t type) {
  return type == chorusFloat16 || type == chorusFloat32 || type == chorusFloat64 || type == chorusBfloat16 ||
         type == chorusFloat8e4m3 || type == chorusFloat8e5m2;
}

const char* bitwiseName(chorusRedOp_t op) {
  switch (op) {
    case chorusBand:
      return "chorusBand (bitwise and)";
    case chorusBor:
      return "chorusBor (bitwise or)";
    case chorusBxor:
      return "chorusBxor (bitwise exclusive or)";
    default:
      return nullptr;
  }
}

}  // namespace

Result<chorusRedOp_t> RedOpTable::createPreMulSum(const void* scalar, chorusDataType_t type,
                                                  chorusScalarResidence_t residence) {
  PreMulOp op;
  op.live = true;
  op.type = type;
  op.residence = residence;
  if (residence == chorusScalarHostImmediate) {
    std::memcpy(op.value, scalar, typeSize(type));
  } else {
    op.ptr = scalar;
  }
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (!ops_[i].live) {
      ops_[i] = op;
      return static_cast<chorusRedOp_t>(chorusNumOps + static_cast<int>(i));
    }
  }
  if (ops_.size() >= 1u << 20) return invalidUsage("too many live custom reduction operators; destroy some");
  ops_.push_back(op);
  return static_cast<chorusRedOp_t>(chorusNumOps + static_cast<int>(ops_.size() - 1));
}

Status RedOpTable::destroy(chorusRedOp_t op) {
  std::lock_guard<std::mutex> g(mu_);
  const int idx = static_cast<int>(op) - chorusNumOps;
  if (op < chorusNumOps || bitwiseName(op)) {
    return invalidArgument("operator " + std::to_string(op) +
                           " is built in; only operators made by "
                           "chorusRedOpCreatePreMulSum can be destroyed");
  }
  if (idx >= static_cast<int>(ops_.size()) || !ops_[idx].live) {
    return invalidArgument("operator " + std::to_string(op) +
                           " was not created on this communicator or was already "
                           "destroyed");
  }
  ops_[idx].live = false;
  return Status::ok();
}

Status RedOpTable::check(chorusRedOp_t op, chorusDataType_t type) const {
  if (op >= 0 && op < chorusNumOps) return Status::ok();
  if (const char* name = bitwiseName(op)) {
    if (!isFloating(type)) return Status::ok();
    return invalidArgument(std::string(name) + " reduces integer types only, not " + typeName(type) +
                           " (use chorusSum, chorusProd, chorusMax, chorusMin or chorusAvg, or reduce the "
                           "data's bits as an unsigned integer type of its size)");
  }
  std::lock_guard<std::mutex> g(mu_);
  const int idx = static_cast<int>(op) - chorusNumOps;
  if (op < 0 || idx >= static_cast<int>(ops_.size()) || !ops_[idx].live) {
    return invalidArgument("reduction operator " + std::to_string(op) +
                           " is neither built in (sum, prod, max, min, avg; band, bor, bxor for integers) nor a live "
                           "operator of this communicator "
                           "(destroyed, or created on another communicator?)");
  }
  if (ops_[idx].type != type) {
    return invalidArgument(std::string("reduction operator ") + std::to_string(op) + " was created for " +
                           typeName(ops_[idx].type) + " but is used with " + typeName(type));
  }
  return Status::ok();
}

ReduceSpec RedOpTable::spec(chorusRedOp_t op, chorusDataType_t type, bool onDevice) const {
  ReduceSpec s;
  const bool isFloat = isFloating(type);
  static_assert(int(RedKind::kSum) == chorusSum && int(RedKind::kProd) == chorusProd &&
                    int(RedKind::kMax) == chorusMax && int(RedKind::kMin) == chorusMin,
                "the built-in operators and RedKind are numbered alike");
  switch (op) {
    case chorusSum:
    case chorusProd:
    case chorusMax:
    case chorusMin:
      s.kind = static_cast<RedKind>(op);
      return s;
    case chorusBand:
      s.kind = RedKind::kBand;
      return s;
    case chorusBor:
      s.kind = RedKind::kBor;
      return s;
    case chorusBxor:
      s.kind = RedKind::kBxor;
      return s;
    case chorusAvg:
      s.kind = RedKind::kSum;
      if (isFloat) {
        s.hasPre = true;
        s.scaleF = 1.0 / nranks_;
      } else {
        s.hasPostDiv = true;
        s.divisor = static_cast<uint64_t>(nranks_);
      }
      return s;
    default:
      break;
  }
  // Pre-multiplied sum: a host scalar is read now (the call copies the operator, as NCCL does, so
  // that destroying it before the group ends changes nothing); a device scalar of a call on
  // device buffers is read by the kernel when it runs, in the stream's order.
  PreMulOp p;
  {
    std::lock_guard<std::mutex> g(mu_);
    p = ops_[static_cast<int>(op) - chorusNumOps];
  }
  s.kind = RedKind::kSum;
  s.hasPre = true;
  if (p.residence == chorusScalarDevice && onDevice) {
    s.scalePtr = p.ptr;
    return s;
  }
  setScale(s, type, p.residence == chorusScalarHostImmediate ? p.value : p.ptr);
  return s;
}

}  // namespace chorus
