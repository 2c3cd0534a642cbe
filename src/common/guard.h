// How every C API function runs its body: guard() maps a Status to chorusResult_t, keeps the
// message for chorusGetLastError, and turns any escaped exception into chorusInternalError, so
// nothing escapes extern "C".
#pragma once

#include <strings.h>

#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "include/chorus/chorus.h"
#include "src/common/config.h"
#include "src/common/status.h"

namespace chorus {

// Every error an API call returns also goes to this hook, when one is set: the core records it
// for the group the calling thread is in, so chorusGroupEnd reports it too. Set once, at load.
using ApiErrorHook = void (*)(const Status&);
void setApiErrorHook(ApiErrorHook hook);
void reportApiError(const Status& s);

// The calling thread's last error, as chorusGetLastError returns it.
inline std::string& lastError() {
  static thread_local std::string message;
  return message;
}

// Whether `name` is a path of a source file, as CHORUS_TRY's trail names them.
inline bool isSourceFile(std::string_view name) {
  if (name.find_first_of(": ") != std::string_view::npos) return false;
  for (std::string_view ext : {".cc", ".h", ".cu", ".cuh", ".c", ".cpp"}) {
    if (name.size() > ext.size() && name.substr(name.size() - ext.size()) == ext) return true;
  }
  return false;
}

// A message as users see it: without the " [src/...:line]" trail that CHORUS_TRY adds on the way
// up, unless CHORUS_DEBUG=TRACE asks for it.
inline std::string userMessage(const std::string& m) {
  if (strcasecmp(kDebugLevel.raw().c_str(), "TRACE") == 0) return m;
  std::string out;
  out.reserve(m.size());
  for (size_t i = 0; i < m.size();) {
    if (m.compare(i, 2, " [") == 0) {
      // " [FILE:LINE]" where FILE is a source file; an address in brackets (an IPv6 endpoint,
      // " [fd00::2]:29500") stays.
      const size_t close = m.find(']', i);
      const size_t colon = close == std::string::npos ? std::string::npos : m.rfind(':', close);
      bool trail = colon != std::string::npos && colon > i + 2 && close > colon + 1 &&
                   isSourceFile(std::string_view(m).substr(i + 2, colon - i - 2));
      for (size_t k = colon + 1; trail && k < close; ++k) trail = m[k] >= '0' && m[k] <= '9';
      if (trail) {
        i = close + 1;
        continue;
      }
    }
    out += m[i++];
  }
  return out;
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
    lastError() = std::string(fn) + ": " + userMessage(s.message());
    reportApiError(Status(s.code(), lastError()));
  }
  return s.code();
}

}  // namespace chorus
