// chorusCommSplit and chorusCommShrink: new communicators from a parent's ranks.
#include "src/core/comm.h"

#include <algorithm>
#include <cstring>

namespace chorus {
namespace {

uint64_t mix(uint64_t a, uint64_t b) {
  a ^= b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2);
  return a * 0xff51afd7ed558ccdull;
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::split(Communicator& parent, int color, int key,
                                                          const CommOptions& options) {
  if (color < 0 && color != CHORUS_SPLIT_NOCOLOR) {
    return invalidArgument("color must be non-negative or CHORUS_SPLIT_NOCOLOR, not " + std::to_string(color));
  }
  struct SplitRecord {
    int32_t color;
    int32_t key;
    SockAddr addr;
  };
  SplitRecord mine{color, key, SockAddr()};
  UniqueFd listener;
  if (color != CHORUS_SPLIT_NOCOLOR) {
    // On the parent's interface: the one its ranks already reach this rank at.
    SockAddr local = parent.bootstrap_->address(parent.rank_);
    local.setPort(0);
    CHORUS_ASSIGN_OR_RETURN(listener, listenOn(local, &mine.addr));
  }
  std::vector<SplitRecord> all(parent.nranks_);
  all[parent.rank_] = mine;
  CHORUS_TRY(parent.bootstrap_->allGather(all.data(), sizeof(SplitRecord)));
  const uint64_t seq = ++parent.seq_.split;
  if (color == CHORUS_SPLIT_NOCOLOR) return std::unique_ptr<Communicator>();

  std::vector<int> members;
  for (int r = 0; r < parent.nranks_; ++r) {
    if (all[r].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[a].key != all[b].key ? all[a].key < all[b].key : a < b; });
  std::vector<SockAddr> addrs;
  int newRank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    addrs.push_back(all[members[i]].addr);
    if (members[i] == parent.rank_) newRank = static_cast<int>(i);
  }
  CHORUS_ASSIGN_OR_RETURN(auto c, child(parent, options, mix(mix(parent.commId_, seq), static_cast<uint64_t>(color)),
                                        newRank, std::move(addrs), std::move(listener)));
  parent.log_.info(kSubsysInit, "split color {} key {}: new rank {} of {}", color, key, newRank, c->nranks_);
  return c;
}

namespace {

// What each survivor of a shrink tells every other rank of the parent: the call it makes (its
// exclude list, by hash and count, with the first entries for messages) and where its new
// communicator listens.
struct ShrinkRecord {
  static constexpr uint64_t kMagic = 0x4348534852494e4bull;  // "CHSHRINK"
  static constexpr int kShown = 16;
  uint64_t magic;
  uint64_t seq;
  uint64_t listHash;
  int32_t count;
  int32_t shown[kShown];
  SockAddr addr;
};

std::string listText(const int32_t* r, int count, int shown) {
  std::string s = "[";
  for (int i = 0; i < std::min(count, shown); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  if (count > shown) s += ", ... (" + std::to_string(count) + " ranks)";
  return s + "]";
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::shrink(Communicator& parent, const std::vector<int>& exclude,
                                                           bool abortParent, const CommOptions& options) {
  const int n = parent.nranks_;
  std::vector<int> list = exclude;
  std::sort(list.begin(), list.end());
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] < 0 || list[i] >= n) {
      return invalidArgument("excludeRanksList holds rank " + std::to_string(list[i]) + ", outside [0, " +
                             std::to_string(n) + ")");
    }
    if (i > 0 && list[i] == list[i - 1]) {
      return invalidArgument("excludeRanksList names rank " + std::to_string(list[i]) + " twice");
    }
  }
  if (std::binary_search(list.begin(), list.end(), parent.rank_)) {
    return invalidArgument("rank " + std::to_string(parent.rank_) +
                           " is in its own excludeRanksList: an excluded rank must not call chorusCommShrink");
  }
  // The parent's operations: stopped (they fail at once) or waited for.
  if (abortParent) {
    parent.health().fail(
        remoteError("chorusCommShrink with CHORUS_SHRINK_ABORT stopped this communicator's operations"), false);
  }
  (void)parent.waitIdle();

  ShrinkRecord mine{};
  mine.magic = ShrinkRecord::kMagic;
  mine.seq = ++parent.seq_.shrink;
  mine.count = static_cast<int32_t>(list.size());
  mine.listHash = fnv1a(list.data(), list.size() * sizeof(int));
  for (size_t i = 0; i < list.size() && i < static_cast<size_t>(ShrinkRecord::kShown); ++i) mine.shown[i] = list[i];
  SockAddr local = parent.bootstrap_->address(parent.rank_);
  local.setPort(0);
  CHORUS_ASSIGN_OR_RETURN(UniqueFd listener, listenOn(local, &mine.addr));

  // To every other rank of the parent at once, the excluded ones too (best effort): a rank left
  // out by mistake then hears of it at once instead of at its timeout. Survivors must be reached.
  const uint64_t tag = makeTag(TagSpace::kShrink, mine.seq);
  std::vector<int> others;
  for (int r = 0; r < n; ++r) {
    if (r != parent.rank_) others.push_back(r);
  }
  const int64_t reachBy = nowNs() + std::min<int64_t>(parent.config_.timeoutNs, int64_t(10) * 1000000000);
  const auto told = parent.bootstrap_->sendAllAtOnce(
      others, tag, std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)), reachBy);
  for (size_t i = 0; i < others.size(); ++i) {
    if (!told[i] && !std::binary_search(list.begin(), list.end(), others[i])) {
      return systemError("chorusCommShrink could not reach " + parent.describePeer(others[i]) +
                         ", which is not in excludeRanksList: if it failed, exclude it");
    }
  }
  std::vector<SockAddr> addrs;
  int newRank = -1;
  for (int r = 0; r < n; ++r) {
    if (std::binary_search(list.begin(), list.end(), r)) continue;
    if (r == parent.rank_) {
      newRank = static_cast<int>(addrs.size());
      addrs.push_back(mine.addr);
      continue;
    }
    CHORUS_ASSIGN_OR_RETURN(std::vector<char> m, parent.bootstrap_->recv(r, tag));
    ShrinkRecord theirs{};
    if (m.size() != sizeof(theirs))
      return systemError("chorusCommShrink got a malformed record from rank " + std::to_string(r));
    std::memcpy(&theirs, m.data(), sizeof(theirs));
    if (theirs.magic != ShrinkRecord::kMagic || theirs.seq != mine.seq || !theirs.addr.valid() || theirs.count < 0 ||
        theirs.count > n) {
      return systemError("chorusCommShrink got a malformed record from rank " + std::to_string(r));
    }
    if (theirs.count != mine.count || theirs.listHash != mine.listHash) {
      return invalidUsage("chorusCommShrink: rank " + std::to_string(r) + " passed excludeRanksList " +
                          listText(theirs.shown, theirs.count, ShrinkRecord::kShown) + " but rank " +
                          std::to_string(parent.rank_) + " passed " +
                          listText(mine.shown, mine.count, ShrinkRecord::kShown) +
                          "; every surviving rank must pass the same list");
    }
    addrs.push_back(theirs.addr);
  }

  CHORUS_ASSIGN_OR_RETURN(
      auto c, child(parent, options, mix(mix(parent.commId_, 0x5348524b00000000ull + mine.seq), mine.listHash), newRank,
                    std::move(addrs), std::move(listener)));
  parent.log_.info(kSubsysInit, "shrink without {}: new rank {} of {}",
                   listText(mine.shown, mine.count, ShrinkRecord::kShown), newRank, c->nranks_);
  return c;
}

}  // namespace chorus
