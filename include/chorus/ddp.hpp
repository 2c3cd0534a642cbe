// A thin C++ wrapper over chorus/ddp.h: the reducer as an owning object, errors as exceptions,
// and no_sync as a scope (as PyTorch's `with model.no_sync():`).
#ifndef CHORUS_DDP_HPP_
#define CHORUS_DDP_HPP_

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddp.h"

namespace chorus {

class Error : public std::runtime_error {
 public:
  Error(chorusResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  chorusResult_t code() const { return code_; }

 private:
  chorusResult_t code_;
};

// Throws chorus::Error with chorusGetLastError's sentence when rc is not chorusSuccess.
inline void check(chorusResult_t rc) {
  if (rc != chorusSuccess) throw Error(rc, chorusGetLastError(nullptr));
}

class DdpReducer {
 public:
  DdpReducer(chorusComm_t comm, const std::vector<chorusDdpParam_t>& params,
             const chorusDdpConfig_t* config = nullptr) {
    check(chorusDdpReducerCreate(&r_, comm, params.data(), static_cast<int>(params.size()), config));
  }
  ~DdpReducer() {
    if (r_) (void)chorusDdpReducerDestroy(r_);
  }
  DdpReducer(DdpReducer&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  DdpReducer& operator=(DdpReducer&& o) noexcept {
    std::swap(r_, o.r_);
    return *this;
  }
  DdpReducer(const DdpReducer&) = delete;
  DdpReducer& operator=(const DdpReducer&) = delete;

  chorusDdpReducer_t get() const { return r_; }

  template <typename T = void>
  T* gradient(int index) const {
    void* g = nullptr;
    check(chorusDdpGradient(r_, index, &g));
    return static_cast<T*>(g);
  }
  // Returns true when the buckets were rebuilt: gradient addresses changed.
  bool prepareForBackward() {
    int rebuilt = 0;
    check(chorusDdpPrepareForBackward(r_, &rebuilt));
    return rebuilt != 0;
  }
  void markReady(int index) { check(chorusDdpMarkReady(r_, index)); }
  // The gradient is written by work enqueued on `producer` (chorusDdpMarkReadyOn).
  void markReadyOn(int index, chorusStream_t producer) { check(chorusDdpMarkReadyOn(r_, index, producer)); }
  void markUnused(int index) { check(chorusDdpMarkUnused(r_, index)); }
  void finalize() { check(chorusDdpFinalize(r_)); }
  // `stream` waits for the buckets instead of the caller (chorusDdpFinalizeOn).
  void finalizeOn(chorusStream_t stream) { check(chorusDdpFinalizeOn(r_, stream)); }
  void zeroGrad() { check(chorusDdpZeroGrad(r_)); }
  void setSync(bool enabled) { check(chorusDdpSetSync(r_, enabled ? 1 : 0)); }
  bool paramUsed(int index) const {
    int used = 0;
    check(chorusDdpParamUsed(r_, index, &used));
    return used != 0;
  }
  void broadcastParameters(const std::vector<void*>& params, int root = 0) {
    check(chorusDdpBroadcastParameters(r_, params.data(), root));
  }
  void registerCommHook(chorusDdpCommHook_t fn, void* state) { check(chorusDdpRegisterCommHook(r_, fn, state)); }
  void join(const std::vector<void*>* params = nullptr) { check(chorusDdpJoin(r_, params ? params->data() : nullptr)); }
  chorusDdpStats_t stats() const {
    chorusDdpStats_t s;
    check(chorusDdpGetStats(r_, &s));
    return s;
  }

  // Gradients accumulate locally while it lives.
  class NoSync {
   public:
    explicit NoSync(DdpReducer& r) : r_(r) { r_.setSync(false); }
    ~NoSync() { (void)chorusDdpSetSync(r_.get(), 1); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DdpReducer& r_;
  };

 private:
  chorusDdpReducer_t r_ = nullptr;
};

}  // namespace chorus

#endif  // CHORUS_DDP_HPP_
