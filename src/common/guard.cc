#include "src/common/guard.h"

#include <atomic>

namespace chorus {
namespace {

std::atomic<ApiErrorHook> gHook{nullptr};  // constant-initialised: set before any call can read it

}  // namespace

void setApiErrorHook(ApiErrorHook hook) { gHook.store(hook, std::memory_order_release); }

void reportApiError(const Status& s) {
  if (ApiErrorHook hook = gHook.load(std::memory_order_acquire)) hook(s);
}

}  // namespace chorus
