// Host streams' work items (src/core/stream.h): a callable kept inside the item or on the heap,
// moved without copies, run in order, and destroyed before its completion is visible.
#include <array>
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "src/core/stream.h"

using namespace chorus;

TEST_CASE("a stream item keeps a small callable inside and a large one on the heap", "[stream]") {
  auto owner = std::make_shared<int>(7);
  std::weak_ptr<int> watch = owner;
  int runs = 0;
  {
    StreamItem small([&runs, keep = owner]() -> Status {
      ++runs;
      return *keep == 7 ? Status::ok() : internalError("wrong capture");
    });
    std::array<char, 512> big{};
    big[511] = 3;
    StreamItem large([&runs, big, keep = owner]() -> Status {
      runs += big[511];
      return Status::ok();
    });
    owner.reset();
    CHECK_FALSE(watch.expired());  // both items hold it
    StreamItem moved(std::move(small));
    CHECK_FALSE(static_cast<bool>(small));  // NOLINT: moved-from is empty, by design
    CHECK(moved().isOk());
    StreamItem other;
    other = std::move(large);
    CHECK(other().isOk());
    CHECK(runs == 4);
    moved.reset();
    other.reset();
    CHECK(watch.expired());  // reset destroys what the callables captured, at once
  }
}

TEST_CASE("a host stream runs its items in order and keeps the first error", "[stream]") {
  Stream s;
  std::vector<int> order;
  auto witness = std::make_shared<int>(0);
  std::weak_ptr<int> watch = witness;
  for (int i = 0; i < 100; ++i) {
    s.enqueue([&order, i, keep = witness]() -> Status {
      order.push_back(i);
      return i == 40 ? invalidUsage("item 40") : i == 60 ? invalidUsage("item 60") : Status::ok();
    });
  }
  witness.reset();
  Status st = s.synchronize();
  CHECK(st.code() == chorusInvalidUsage);
  CHECK(st.message() == "item 40");
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(order[i] == i);
  CHECK(watch.expired());  // every item's captures are gone once the stream reached it
}
