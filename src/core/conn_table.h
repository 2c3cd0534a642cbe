// A communicator's connections, in one table keyed by family, index (the channel for rings, the
// peer otherwise) and direction (src/algo/connections.h). Lanes that talk to every peer take a
// family's cursors as one array indexed by rank.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "src/algo/connections.h"
#include "src/core/lane.h"

namespace chorus {

class ConnTable {
 public:
  // Sizes every family, once (threads read it while connections are added): kRingSets *
  // nChannels entries for rings, nranks for the others.
  void init(int nranks, int nChannels) {
    for (int f = 0; f < kConnFamilies; ++f) {
      const size_t n = static_cast<size_t>(f == static_cast<int>(ConnFamily::kRing) ? kRingSets * nChannels : nranks);
      fam_[f].send.resize(n);
      fam_[f].recv.resize(n);
    }
  }

  SendCursor* send(ConnFamily f, int index) const { return of(f).send[static_cast<size_t>(index)].get(); }
  RecvCursor* recv(ConnFamily f, int index) const { return of(f).recv[static_cast<size_t>(index)].get(); }
  bool has(const ConnKey& k) const {
    return k.send ? send(k.family, k.index) != nullptr : recv(k.family, k.index) != nullptr;
  }
  // A family's cursors indexed by rank (peer families); this rank's entry is null.
  const std::unique_ptr<SendCursor>* sends(ConnFamily f) const { return of(f).send.data(); }
  const std::unique_ptr<RecvCursor>* recvs(ConnFamily f) const { return of(f).recv.data(); }

  void put(ConnFamily f, int index, std::unique_ptr<SendCursor> c) {
    of(f).send[static_cast<size_t>(index)] = std::move(c);
  }
  void put(ConnFamily f, int index, std::unique_ptr<RecvCursor> c) {
    of(f).recv[static_cast<size_t>(index)] = std::move(c);
  }

  // Whether any send cursor satisfies `pred`.
  template <typename Pred>
  bool anySend(Pred pred) const {
    for (const Family& fam : fam_) {
      for (const auto& c : fam.send) {
        if (c && pred(*c)) return true;
      }
    }
    return false;
  }

 private:
  struct Family {
    std::vector<std::unique_ptr<SendCursor>> send;
    std::vector<std::unique_ptr<RecvCursor>> recv;
  };
  Family& of(ConnFamily f) { return fam_[static_cast<size_t>(f)]; }
  const Family& of(ConnFamily f) const { return fam_[static_cast<size_t>(f)]; }

  std::array<Family, kConnFamilies> fam_;
};

}  // namespace chorus
