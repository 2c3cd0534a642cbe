// Helpers shared by the tests.
#pragma once

#include <string>
#include <vector>

#include "include/chorus/chorus.h"

namespace chorus::test {

// n ranks as threads of this process (chorusCommInitAll); destroys them at the end.
class World {
 public:
  explicit World(int n) : comms_(n, nullptr) { rc_ = chorusCommInitAll(comms_.data(), n, nullptr); }
  ~World() {
    for (auto c : comms_) {
      if (c) chorusCommDestroy(c);
    }
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  bool ok() const { return rc_ == chorusSuccess; }
  chorusComm_t comm(int r) const { return comms_[r]; }
  chorusComm_t operator[](int r) const { return comms_[r]; }
  // Gives up rank r's communicator (for chorusCommAbort); the World no longer destroys it.
  chorusComm_t release(int r) {
    chorusComm_t c = comms_[r];
    comms_[r] = nullptr;
    return c;
  }
  const std::vector<chorusComm_t>& comms() const { return comms_; }
  int size() const { return static_cast<int>(comms_.size()); }

 private:
  std::vector<chorusComm_t> comms_;
  chorusResult_t rc_;
};

}  // namespace chorus::test
