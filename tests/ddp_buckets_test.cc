// Gradient bucket assignment on its own (src/ddp/buckets.h), against cases derived by hand from
// PyTorch DDP's rules, and properties over random parameter lists.
#include <catch2/catch.hpp>
#include <random>
#include <set>

#include "src/ddp/buckets.h"

using chorus::ddp::Bucket;
using chorus::ddp::ParamInfo;

namespace {
constexpr size_t kMiB = size_t(1) << 20;

size_t elemBytes(chorusDataType_t t) {
  return t == chorusFloat16 || t == chorusBfloat16 ? 2 : t == chorusFloat32 ? 4 : 8;
}

std::vector<std::vector<size_t>> indices(const std::vector<Bucket>& b) {
  std::vector<std::vector<size_t>> out;
  for (const auto& x : b) out.push_back(x.params);
  return out;
}
}  // namespace

TEST_CASE("the first bucket is small, later ones capped; first iteration reversed", "[ddp]") {
  // Five float parameters of 1.2 MB: the first closes the 1 MiB bucket alone, the rest share one.
  std::vector<ParamInfo> p(5, ParamInfo{300000, chorusFloat32});
  auto b = chorus::ddp::initialBuckets(p, kMiB, 25 * kMiB);
  CHECK(indices(b) == std::vector<std::vector<size_t>>{{1, 2, 3, 4}, {0}});
  CHECK(b[0].bytes == 4800000);
  CHECK(b[0].limit == 25 * kMiB);
  CHECK(b[1].limit == kMiB);
  // After a rebuild in the order the gradients came (last defined first): no reversal.
  auto r = chorus::ddp::rebuiltBuckets(p, {4, 3, 2, 1, 0}, kMiB, 25 * kMiB);
  CHECK(indices(r) == std::vector<std::vector<size_t>>{{4}, {3, 2, 1, 0}});
}

TEST_CASE("a bucket holds one type; each type has its own small first bucket", "[ddp]") {
  std::vector<ParamInfo> p = {{100, chorusFloat32},
                              {100, chorusFloat16},
                              {300000, chorusFloat32},
                              {600000, chorusFloat16},
                              {10, chorusFloat32}};
  auto b = chorus::ddp::initialBuckets(p, kMiB, 25 * kMiB);
  CHECK(indices(b) == std::vector<std::vector<size_t>>{{4}, {1, 3}, {0, 2}});
  CHECK(b[0].type == chorusFloat32);
  CHECK(b[1].type == chorusFloat16);
  CHECK(b[1].bytes == 200 + 1200000);
  CHECK(b[2].bytes == 400 + 1200000);
}

TEST_CASE("parameters larger than the cap get buckets of their own", "[ddp]") {
  std::vector<ParamInfo> p(3, ParamInfo{10000000, chorusFloat32});
  auto b = chorus::ddp::initialBuckets(p, kMiB, 25 * kMiB);
  CHECK(indices(b) == std::vector<std::vector<size_t>>{{2}, {1}, {0}});
  CHECK(b[0].limit == 25 * kMiB);
  CHECK(b[2].limit == kMiB);
  // A static graph uses the cap for the first bucket too.
  auto s =
      chorus::ddp::initialBuckets(std::vector<ParamInfo>(4, ParamInfo{1000000, chorusFloat32}), 25 * kMiB, 25 * kMiB);
  CHECK(indices(s) == std::vector<std::vector<size_t>>{{0, 1, 2, 3}});
}

TEST_CASE("every parameter lands in exactly one bucket of its type, within the limits", "[ddp]") {
  std::mt19937 rng(5);
  const chorusDataType_t types[] = {chorusFloat32, chorusFloat16, chorusBfloat16, chorusFloat64, chorusInt64};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<ParamInfo> p(1 + rng() % 60);
    for (auto& x : p) x = ParamInfo{rng() % 2000000, types[rng() % 5]};
    const size_t first = 1 + rng() % (2 * kMiB), cap = first + rng() % (8 * kMiB);
    std::vector<size_t> ready(p.size());
    for (size_t i = 0; i < ready.size(); ++i) ready[i] = i;
    std::shuffle(ready.begin(), ready.end(), rng);
    for (const auto& b :
         {chorus::ddp::initialBuckets(p, first, cap), chorus::ddp::rebuiltBuckets(p, ready, first, cap)}) {
      std::multiset<size_t> seen;
      std::multiset<int> underfull;  // per type: buckets left below their limit (only the last one may be)
      for (const Bucket& x : b) {
        REQUIRE_FALSE(x.params.empty());
        size_t bytes = 0;
        for (size_t i : x.params) {
          seen.insert(i);
          REQUIRE(p[i].type == x.type);
          bytes += p[i].count * elemBytes(x.type);
        }
        REQUIRE(bytes == x.bytes);
        REQUIRE((x.limit == first || x.limit == cap));
        // It was below its limit until its last parameter came.
        REQUIRE(x.bytes - p[x.params.back()].count * elemBytes(x.type) < x.limit);
        if (x.bytes < x.limit) underfull.insert(x.type);
      }
      for (chorusDataType_t t : types) REQUIRE(underfull.count(t) <= 1);
      REQUIRE(seen.size() == p.size());
      REQUIRE(std::set<size_t>(seen.begin(), seen.end()).size() == p.size());
    }
  }
}
