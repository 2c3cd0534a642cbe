// How every C API function runs its body: guard() maps a Status to chorusResult_t, keeps the
// message for chorusGetLastError, and turns any escaped exception into chorusInternalError, so
// nothing escapes extern "C".
#pragma once

#include <exception>
#include <new>
#include <string>

#include "include/chorus/chorus.h"
#include "src/core/group.h"
#include "src/core/status.h"

namespace chorus {

// The calling thread's last error, as chorusGetLastError returns it.
inline std::string& lastError() {
  static thread_local std::string message;
  return message;
}

template <typename F>
chorusResult_t guard(const char* fn, F&& body) {
  Status s;
  try {
    s = body();
  } catch (const std::bad_alloc&) {
    s = systemError("out of memory");
  } catch (const std::exception& e) {
    s = internalError(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    s = internalError("unexpected exception");
  }
  if (!s.isOk() && !s.inProgress()) {
    lastError() = std::string(fn) + ": " + s.message();
    groupFail(Status(s.code(), lastError()));
  }
  return s.code();
}

}  // namespace chorus
