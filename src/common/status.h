// Status and Result<T>: how every internal function reports failure.
//
// A Status carries a chorusResult_t code and a sentence for a person. "In progress" is an ordinary
// value (chorusInProgress), not an error. CHORUS_TRY propagates a failed Status and appends the file
// and line, so a message read at the C boundary tells where it came from.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "include/chorus/chorus.h"

namespace chorus {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(chorusResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == chorusSuccess; }
  bool inProgress() const { return code_ == chorusInProgress; }
  chorusResult_t code() const { return code_; }
  const std::string& message() const { return message_; }
  // The rank the failure is about (one waited for in vain, one found dead), or -1: what a failure
  // notice leads with, instead of the rank that merely noticed.
  int subject() const { return subject_; }
  Status& about(int rank) {
    subject_ = rank;
    return *this;
  }

  // Adds where the failure passed through; used by CHORUS_TRY.
  Status& addContext(const char* file, int line) {
    message_ += " [";
    message_ += file;
    message_ += ":";
    message_ += std::to_string(line);
    message_ += "]";
    return *this;
  }

 private:
  chorusResult_t code_ = chorusSuccess;
  std::string message_;
  int subject_ = -1;
};

inline Status invalidArgument(std::string m) { return Status(chorusInvalidArgument, std::move(m)); }
inline Status invalidUsage(std::string m) { return Status(chorusInvalidUsage, std::move(m)); }
inline Status systemError(std::string m) { return Status(chorusSystemError, std::move(m)); }
inline Status internalError(std::string m) { return Status(chorusInternalError, std::move(m)); }
inline Status remoteError(std::string m) { return Status(chorusRemoteError, std::move(m)); }
// A failed system call: the message names the call's purpose and errno's text.
// A system error for `what` failing with errno `err`; out of descriptors (EMFILE) says how many
// are open, the limit, and what to do.
Status errnoStatus(const std::string& what, int err);
// "N descriptors open, the limit is L (ulimit -n; ...)".
std::string describeFdLimit();
// Descriptors one rank holds while it starts (its listener, descriptor server, wake-up event and
// connection to the root), besides one or two per peer in another process once connected.
constexpr int kFdsPerRank = 4;

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT

  bool isOk() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T&& take() { return std::move(std::get<0>(v_)); }
  Status status() const { return isOk() ? Status() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace chorus

#define CHORUS_STATUS_CONCAT_(a, b) a##b
#define CHORUS_STATUS_CONCAT(a, b) CHORUS_STATUS_CONCAT_(a, b)

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define CHORUS_TRY(expr)                               \
  do {                                                 \
    ::chorus::Status chorusTryStatus_ = (expr);        \
    if (!chorusTryStatus_.isOk()) {                    \
      chorusTryStatus_.addContext(__FILE__, __LINE__); \
      return chorusTryStatus_;                         \
    }                                                  \
  } while (0)

// `CHORUS_ASSIGN_OR_RETURN(auto x, makeX())`: binds the value of a Result or returns its Status.
#define CHORUS_ASSIGN_OR_RETURN(decl, expr)                           \
  auto CHORUS_STATUS_CONCAT(chorusResult_, __LINE__) = (expr);        \
  if (!CHORUS_STATUS_CONCAT(chorusResult_, __LINE__).isOk()) {        \
    auto s_ = CHORUS_STATUS_CONCAT(chorusResult_, __LINE__).status(); \
    s_.addContext(__FILE__, __LINE__);                                \
    return s_;                                                        \
  }                                                                   \
  decl = CHORUS_STATUS_CONCAT(chorusResult_, __LINE__).take()

// A broken invariant is a bug: print and abort.
#define CHORUS_CHECK(cond)                                         \
  do {                                                             \
    if (!(cond)) ::chorus::checkFailed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace chorus {
[[noreturn]] void checkFailed(const char* cond, const char* file, int line);
}
