// Helpers shared by the tests.
#pragma once

#include <cstring>
#include <string>
#include <thread>
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

// Runs f(rank) on one thread per rank and returns the results.
template <typename F>
std::vector<chorusResult_t> onRanks(int n, F f) {
  std::vector<chorusResult_t> rc(n, chorusSuccess);
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back([&, r] { rc[r] = f(r); });
  for (auto& x : t) x.join();
  return rc;
}

// Whether the last error of this thread says something.
inline bool hasMessage() { return std::strlen(chorusGetLastError(nullptr)) > 10; }

}  // namespace chorus::test
