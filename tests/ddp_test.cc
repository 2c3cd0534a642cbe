// The DDP layer alone (include/chorus/ddp.h), ranks as threads: gradients marked in random orders
// from several threads per rank, unused parameters, no_sync, static graphs, the compression hooks
// and a user hook, uneven inputs, the parameter broadcast and the mistakes a framework can make.
// Every reduced gradient is checked element by element against an average computed here, in
// double, from the same generated gradients; every rank must hold the same bits.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus_cuda.h"
#include "include/chorus/ddp.h"
#include "kernels/float_elem.h"
#include "src/common/os.h"
#include "src/core/comm.h"
#include "tests/test_util.h"

using chorus::test::World;

namespace {

// Failures found on rank threads; Catch's assertions are for the main thread.
struct Failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(const std::string& s) {
    std::lock_guard<std::mutex> g(mu);
    if (list.size() < 20) list.push_back(s);
  }
};

#define DDP_OK(f, call)                                                                                      \
  do {                                                                                                       \
    chorusResult_t rc_ = (call);                                                                             \
    if (rc_ != chorusSuccess) {                                                                              \
      (f).add(std::string(#call) + " -> " + chorusGetErrorString(rc_) + ": " + chorusGetLastError(nullptr)); \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

void onRanks(int n, const std::function<void(int)>& f) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back(f, r);
  for (auto& x : t) x.join();
}

size_t sizeOf(chorusDataType_t t) { return chorus::typeSize(t); }

// Element i of a gradient as a double, and back (int32 or one of the floating types).
double load(const void* base, chorusDataType_t t, size_t i) {
  const char* p = static_cast<const char*>(base) + i * sizeOf(t);
  return t == chorusInt32 ? chorus::loadBits<int32_t>(p) : chorus::loadFloatElem(t, p);
}

void store(void* base, chorusDataType_t t, size_t i, double v) {
  char* p = static_cast<char*>(base) + i * sizeOf(t);
  if (t == chorusInt32) {
    const auto x = static_cast<int32_t>(v);
    std::memcpy(p, &x, 4);
  } else {
    chorus::storeFloatElem(t, p, v);
  }
}

double epsilon(chorusDataType_t t) {
  switch (t) {
    case chorusFloat32:
      return 1.2e-7;
    case chorusFloat64:
      return 2.3e-16;
    case chorusBfloat16:
      return 7.9e-3;
    case chorusFloat16:
      return 9.8e-4;
    default:
      return 0;
  }
}

// The gradient a rank produces: small values, exact in every type used here (multiples of 1/8 up to
// 32 for the floats; bf16 has 8 significant bits).
double gradValue(int rank, int iter, size_t param, size_t elem, chorusDataType_t t) {
  const uint64_t key[4] = {uint64_t(rank), uint64_t(iter), uint64_t(param), uint64_t(elem)};
  uint64_t h = chorus::fnv1a(key, sizeof(key));
  h ^= h >> 29;
  const int k = static_cast<int>(h % 255) - 127;
  return t == chorusInt32 ? k * 3 : k / 8.0;
}

struct Model {
  std::vector<chorusDdpParam_t> params;
  std::vector<std::string> names;
};

Model randomModel(uint32_t seed, size_t nparams, std::vector<chorusDataType_t> types) {
  std::mt19937 rng(seed);
  Model m;
  m.names.resize(nparams);
  for (size_t i = 0; i < nparams; ++i) {
    m.names[i] = "layer" + std::to_string(i / 2) + (i % 2 ? ".bias" : ".weight");
    chorusDdpParam_t p;
    p.count = rng() % 7 == 0 ? 0 : 1 + rng() % 300;
    p.type = types[rng() % types.size()];
    p.name = nullptr;
    m.params.push_back(p);
  }
  for (size_t i = 0; i < nparams; ++i) m.params[i].name = m.names[i].c_str();
  return m;
}

// Checks every gradient of `rank` against the sum of the ranks' generated values divided by
// `divisor`: contributions[r][p] is how many iterations of rank r count for parameter p, ending at
// `iter` (0: unused, k: k iterations accumulated).
void checkAverages(Failures& f, chorusDdpReducer_t red, const Model& m, int rank, int iter,
                   const std::vector<std::vector<int>>& contributions, int divisor, double extraTol = 0) {
  const int n = static_cast<int>(contributions.size());
  for (size_t p = 0; p < m.params.size(); ++p) {
    void* g = nullptr;
    if (chorusDdpGradient(red, static_cast<int>(p), &g) != chorusSuccess) {
      f.add("chorusDdpGradient failed");
      return;
    }
    const chorusDataType_t t = m.params[p].type;
    for (size_t e = 0; e < m.params[p].count; ++e) {
      double sum = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        for (int k = 0; k < contributions[r][p]; ++k) {
          const double v = gradValue(r, iter - k, p, e, t);
          sum += v;
          mag += std::fabs(v);
        }
      }
      const double got = load(g, t, e);
      double want = sum / divisor;
      if (t == chorusInt32) want = std::trunc(sum / divisor);
      const double tol = t == chorusInt32 ? 0 : (8 * epsilon(t) + extraTol) * std::max(1.0, mag / divisor);
      if (!(std::fabs(got - want) <= tol)) {
        f.add("rank " + std::to_string(rank) + " iteration " + std::to_string(iter) + " parameter " +
              std::to_string(p) + " element " + std::to_string(e) + ": got " + std::to_string(got) + ", want " +
              std::to_string(want));
        return;
      }
    }
  }
}

// Every rank's gradients, bit for bit the same: rank 0's are copied out and compared.
struct Agreement {
  std::mutex mu;
  std::vector<std::vector<char>> bytes;  // per parameter, from the first rank to report
  void check(Failures& f, chorusDdpReducer_t red, const Model& m, int rank) {
    std::lock_guard<std::mutex> g(mu);
    const bool first = bytes.empty();
    if (first) bytes.resize(m.params.size());
    for (size_t p = 0; p < m.params.size(); ++p) {
      void* grad = nullptr;
      (void)chorusDdpGradient(red, static_cast<int>(p), &grad);
      const size_t n = m.params[p].count * sizeOf(m.params[p].type);
      const char* c = static_cast<const char*>(grad);
      if (first) {
        bytes[p].assign(c, c + n);
      } else if (n && std::memcmp(bytes[p].data(), c, n) != 0) {
        f.add("rank " + std::to_string(rank) + "'s gradient of parameter " + std::to_string(p) + " differs in bits");
        return;
      }
    }
  }
  void reset() { bytes.clear(); }
};

// Writes rank's gradient of iteration iter for parameter p (adding when accumulate).
void writeGrad(chorusDdpReducer_t red, const Model& m, int rank, int iter, size_t p, bool accumulate) {
  void* g = nullptr;
  (void)chorusDdpGradient(red, static_cast<int>(p), &g);
  const chorusDataType_t t = m.params[p].type;
  for (size_t e = 0; e < m.params[p].count; ++e) {
    const double v = gradValue(rank, iter, p, e, t);
    store(g, t, e, accumulate ? load(g, t, e) + v : v);
  }
}

// One backward pass: gradients written and marked in a random order, by `threads` threads taking
// turns from one shared list. Parameters with skip[p] are left out.
void backward(Failures& f, chorusDdpReducer_t red, const Model& m, int rank, int iter, std::mt19937& rng, int threads,
              const std::vector<uint8_t>& skip, bool accumulate) {
  std::vector<int> order(m.params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::shuffle(order.begin(), order.end(), rng);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < order.size();) {
      const int p = order[k];
      if (!skip.empty() && skip[p]) continue;
      writeGrad(red, m, rank, iter, p, accumulate);
      DDP_OK(f, chorusDdpMarkReady(red, p));
    }
  };
  std::vector<std::thread> t;
  for (int i = 0; i < threads; ++i) t.emplace_back(work);
  for (auto& x : t) x.join();
}

chorusDdpConfig_t smallBuckets() {
  chorusDdpConfig_t c = CHORUS_DDP_CONFIG_INITIALIZER;
  c.firstBucketCapBytes = 256;
  c.bucketCapBytes = 1024;
  return c;
}

}  // namespace

TEST_CASE("gradients marked in random orders from several threads are averaged in place", "[ddp]") {
  const int n = 3;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(11, 24, {chorusFloat32, chorusFloat64, chorusInt32, chorusBfloat16});
  const chorusDdpConfig_t cfg = smallBuckets();
  Failures f;
  Agreement agree;
  std::vector<int> rebuiltAt(n, -1), buckets(n, 0);
  const int iters = 5;
  std::vector<std::vector<int>> all(n, std::vector<int>(m.params.size(), 1));
  std::mutex agreeMu;
  std::vector<int> arrived(iters, 0);
  std::condition_variable cv;
  onRanks(n, [&](int r) {
    chorusDdpReducer_t red = nullptr;
    DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
    std::mt19937 rng(100 + r);
    for (int it = 0; it < iters; ++it) {
      int rebuilt = 0;
      DDP_OK(f, chorusDdpPrepareForBackward(red, &rebuilt));
      if (rebuilt) rebuiltAt[r] = it;
      backward(f, red, m, r, it, rng, 2, {}, false);
      DDP_OK(f, chorusDdpFinalize(red));
      checkAverages(f, red, m, r, it, all, n);
      // Bits compared per iteration: every rank reports before any moves on.
      {
        std::unique_lock<std::mutex> g(agreeMu);
        agree.check(f, red, m, r);
        if (++arrived[it] == n) {
          agree.reset();
          cv.notify_all();
        } else {
          cv.wait(g, [&] { return arrived[it] == n; });
        }
      }
    }
    chorusDdpStats_t s;
    DDP_OK(f, chorusDdpGetStats(red, &s));
    buckets[r] = s.nbuckets;
    if (s.syncedIterations != iters || s.iterations != iters || !s.rebuilt || s.totalCommSeconds <= 0) {
      f.add("rank " + std::to_string(r) + " stats: synced " + std::to_string(s.syncedIterations) + ", rebuilt " +
            std::to_string(s.rebuilt) + ", comm " + std::to_string(s.totalCommSeconds));
    }
    DDP_OK(f, chorusDdpReducerDestroy(red));
  });
  CHECK(f.list == std::vector<std::string>{});
  // Rebuilt once, at the second iteration, on every rank alike (the random orders differ from the
  // initial layout, so the layout changes).
  CHECK(rebuiltAt == std::vector<int>(n, 1));
  CHECK(buckets[0] > 4);
}

TEST_CASE("a user hook sees every bucket in bucket order and its result replaces the gradients", "[ddp]") {
  const int n = 2;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(5, 16, {chorusFloat32, chorusFloat64});
  const chorusDdpConfig_t cfg = smallBuckets();
  Failures f;
  struct Seen {
    std::mutex mu;
    std::vector<int> order;
  };
  std::vector<Seen> seen(n);
  // Sums, so the gradients become the sum rather than the average.
  auto hook = [](void* state, const chorusDdpBucket_t* b, chorusComm_t comm, chorusStream_t stream) {
    auto* s = static_cast<Seen*>(state);
    {
      std::lock_guard<std::mutex> g(s->mu);
      s->order.push_back(b->index);
    }
    return chorusAllReduce(b->data, b->data, b->count, b->type, chorusSum, comm, stream);
  };
  const std::vector<std::vector<int>> once(n, std::vector<int>(m.params.size(), 1));
  onRanks(n, [&](int r) {
    chorusDdpReducer_t red = nullptr;
    DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
    DDP_OK(f, chorusDdpRegisterCommHook(red, hook, &seen[r]));
    std::mt19937 rng(7 + r);
    for (int it = 0; it < 4; ++it) {
      if (it == 3) DDP_OK(f, chorusDdpRegisterCommHook(red, nullptr, nullptr));  // back to the average
      seen[r].order.clear();
      DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
      backward(f, red, m, r, it, rng, 3, {}, false);
      DDP_OK(f, chorusDdpFinalize(red));
      checkAverages(f, red, m, r, it, once, it == 3 ? n : 1);
      chorusDdpStats_t s;
      DDP_OK(f, chorusDdpGetStats(red, &s));
      std::vector<int> expect;
      if (it < 3) {
        // Empty buckets (parameters of no elements) communicate nothing and skip the hook.
        for (int b = 0; b < s.nbuckets; ++b) {
          chorusDdpBucket_t view;
          DDP_OK(f, chorusDdpGetBucket(red, b, &view));
          if (view.count > 0) expect.push_back(b);
        }
      }
      if (seen[r].order != expect) f.add("rank " + std::to_string(r) + ": hook order differs from bucket order");
    }
    DDP_OK(f, chorusDdpReducerDestroy(red));
  });
  CHECK(f.list == std::vector<std::string>{});
}

TEST_CASE("fp16 and bf16 compression hooks reduce in the narrow type and convert back", "[ddp]") {
  const int n = 3;
  for (int hook : {chorusDdpHookFp16, chorusDdpHookBf16}) {
    INFO("hook " << hook);
    World w(n);
    REQUIRE(w.ok());
    const Model m = randomModel(21, 14, {chorusFloat32, chorusFloat64, chorusInt32});
    chorusDdpConfig_t cfg = smallBuckets();
    cfg.hook = hook;
    const chorusDataType_t wire = hook == chorusDdpHookFp16 ? chorusFloat16 : chorusBfloat16;
    Failures f;
    const std::vector<std::vector<int>> once(n, std::vector<int>(m.params.size(), 1));
    onRanks(n, [&](int r) {
      chorusDdpReducer_t red = nullptr;
      DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
      std::mt19937 rng(3 + r);
      for (int it = 0; it < 3; ++it) {
        DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
        backward(f, red, m, r, it, rng, 2, {}, false);
        DDP_OK(f, chorusDdpFinalize(red));
        checkAverages(f, red, m, r, it, once, n, 4 * epsilon(wire));
        // What came back went through the wire type: every float value is one of its values.
        for (size_t p = 0; p < m.params.size(); ++p) {
          const chorusDataType_t t = m.params[p].type;
          if (t == chorusInt32) continue;
          void* g = nullptr;
          DDP_OK(f, chorusDdpGradient(red, static_cast<int>(p), &g));
          for (size_t e = 0; e < m.params[p].count; ++e) {
            const double v = load(g, t, e);
            char bits[8];  // room for any element
            store(bits, wire, 0, v);
            if (load(bits, wire, 0) != v) {
              f.add("parameter " + std::to_string(p) + " holds " + std::to_string(v) +
                    ", not a value of the wire type");
              break;
            }
          }
        }
      }
      DDP_OK(f, chorusDdpReducerDestroy(red));
    });
    CHECK(f.list == std::vector<std::string>{});
  }
}

namespace {
bool skipFor(int rank, int iter, size_t p) {
  if (p == 0) return true;  // unused on every rank
  return gradValue(rank + 1000, iter, p, 7, chorusFloat32) > 6;
}
}  // namespace

TEST_CASE("unused parameters contribute zeros and the used map says which no rank used", "[ddp]") {
  const int n = 3;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(8, 14, {chorusFloat32, chorusFloat64});
  chorusDdpConfig_t cfg = smallBuckets();
  cfg.findUnusedParameters = 1;
  Failures f;
  const int iters = 4;
  onRanks(n, [&](int r) {
    chorusDdpReducer_t red = nullptr;
    DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
    std::mt19937 rng(40 + r);
    for (int it = 0; it < iters; ++it) {
      std::vector<uint8_t> skip(m.params.size());
      std::vector<std::vector<int>> used(n, std::vector<int>(m.params.size()));
      for (size_t p = 0; p < m.params.size(); ++p) {
        skip[p] = skipFor(r, it, p);
        for (int q = 0; q < n; ++q) used[q][p] = skipFor(q, it, p) ? 0 : 1;
      }
      DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
      // Half the unused ones are declared at once; finalize finds the others.
      for (size_t p = 0; p < m.params.size(); ++p) {
        if (skip[p] && p % 2) DDP_OK(f, chorusDdpMarkUnused(red, static_cast<int>(p)));
      }
      backward(f, red, m, r, it, rng, 2, skip, false);
      DDP_OK(f, chorusDdpFinalize(red));
      checkAverages(f, red, m, r, it, used, n);
      for (size_t p = 0; p < m.params.size(); ++p) {
        int u = -1;
        DDP_OK(f, chorusDdpParamUsed(red, static_cast<int>(p), &u));
        const int want = used[0][p] | used[1][p] | used[2][p];
        if (u != want) f.add("parameter " + std::to_string(p) + ": used " + std::to_string(u));
      }
    }
    chorusDdpStats_t s;
    DDP_OK(f, chorusDdpGetStats(red, &s));
    if (s.rebuilt) f.add("buckets were rebuilt although unused parameters may change");
    DDP_OK(f, chorusDdpReducerDestroy(red));
  });
  CHECK(f.list == std::vector<std::string>{});
}

TEST_CASE("static graph: parameters unused in the first iteration are marked at once afterwards", "[ddp]") {
  const int n = 2;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(9, 10, {chorusFloat32});
  chorusDdpConfig_t cfg = smallBuckets();
  cfg.staticGraph = 1;
  Failures f;
  std::vector<uint8_t> skip(m.params.size(), 0);
  skip[3] = skip[7] = 1;
  std::vector<std::vector<int>> used(n, std::vector<int>(m.params.size(), 1));
  for (auto& u : used) u[3] = u[7] = 0;
  onRanks(n, [&](int r) {
    chorusDdpReducer_t red = nullptr;
    DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
    std::mt19937 rng(50 + r);
    for (int it = 0; it < 4; ++it) {
      // A forward with no backward (evaluation, say) before iteration 2's: starting again is fine.
      if (it == 2) DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
      DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
      backward(f, red, m, r, it, rng, 2, skip, false);
      DDP_OK(f, chorusDdpFinalize(red));
      checkAverages(f, red, m, r, it, used, n);
      for (int p : {3, 7, 4}) {
        int u = -1;
        DDP_OK(f, chorusDdpParamUsed(red, p, &u));
        if (u != (p == 4)) f.add("parameter " + std::to_string(p) + ": used " + std::to_string(u));
      }
    }
    chorusDdpStats_t s;
    DDP_OK(f, chorusDdpGetStats(red, &s));
    if (!s.rebuilt) f.add("a static graph rebuilds its buckets");
    DDP_OK(f, chorusDdpReducerDestroy(red));
  });
  CHECK(f.list == std::vector<std::string>{});
}

TEST_CASE("no_sync accumulates locally and the next synchronised iteration reduces the sum", "[ddp]") {
  const int n = 2;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(12, 12, {chorusFloat32, chorusFloat64});
  const chorusDdpConfig_t cfg = smallBuckets();
  Failures f;
  onRanks(n, [&](int r) {
    chorusDdpReducer_t red = nullptr;
    DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
    std::mt19937 rng(60 + r);
    DDP_OK(f, chorusDdpSetSync(red, 0));
    for (int it = 0; it < 2; ++it) {
      DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
      backward(f, red, m, r, it, rng, 2, {}, true);
      DDP_OK(f, chorusDdpFinalize(red));
      // Only this rank's own gradients, summed: nothing was communicated.
      std::vector<std::vector<int>> own(n, std::vector<int>(m.params.size(), 0));
      own[r].assign(m.params.size(), it + 1);
      checkAverages(f, red, m, r, it, own, 1);
    }
    DDP_OK(f, chorusDdpSetSync(red, 1));
    DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
    backward(f, red, m, r, 2, rng, 2, {}, true);
    DDP_OK(f, chorusDdpFinalize(red));
    checkAverages(f, red, m, r, 2, std::vector<std::vector<int>>(n, std::vector<int>(m.params.size(), 3)), n);
    // Zeroed, then a plain iteration.
    DDP_OK(f, chorusDdpZeroGrad(red));
    DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
    backward(f, red, m, r, 3, rng, 2, {}, true);
    DDP_OK(f, chorusDdpFinalize(red));
    checkAverages(f, red, m, r, 3, std::vector<std::vector<int>>(n, std::vector<int>(m.params.size(), 1)), n);
    chorusDdpStats_t s;
    DDP_OK(f, chorusDdpGetStats(red, &s));
    if (s.iterations != 4 || s.syncedIterations != 2) f.add("iterations counted wrong");
    DDP_OK(f, chorusDdpReducerDestroy(red));
  });
  CHECK(f.list == std::vector<std::string>{});
}

TEST_CASE("uneven inputs: ranks that run out of data match the others until all have joined", "[ddp]") {
  const int n = 3;
  // Batches per rank; the last variant has rank 0 join before any iteration, so it has no order
  // to rebuild from.
  for (std::vector<int> batches : {std::vector<int>{5, 2, 3}, std::vector<int>{2, 2, 1}, std::vector<int>{0, 3, 1}}) {
    INFO("batches " << batches[0] << " " << batches[1] << " " << batches[2]);
    World w(n);
    REQUIRE(w.ok());
    const Model m = randomModel(13, 12, {chorusFloat32, chorusInt32});
    for (int findUnused : {0, 1}) {
      chorusDdpConfig_t cfg = smallBuckets();
      cfg.unevenInputs = 1;
      cfg.findUnusedParameters = findUnused;
      Failures f;
      const int most = *std::max_element(batches.begin(), batches.end());
      int lastJoiner = 0;
      for (int q = 0; q < n; ++q) {
        if (batches[q] == most) lastJoiner = q;
      }
      std::vector<std::vector<std::vector<char>>> models(n);
      onRanks(n, [&](int r) {
        chorusDdpReducer_t red = nullptr;
        DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
        std::mt19937 rng(70 + r);
        for (int it = 0; it < batches[r]; ++it) {
          DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
          backward(f, red, m, r, it, rng, 2, {}, false);
          DDP_OK(f, chorusDdpFinalize(red));
          std::vector<std::vector<int>> active(n, std::vector<int>(m.params.size(), 0));
          for (int q = 0; q < n; ++q) {
            if (it < batches[q]) active[q].assign(m.params.size(), 1);
          }
          checkAverages(f, red, m, r, it, active, n);  // divided by the whole world, as PyTorch
        }
        auto& mine = models[r];
        std::vector<void*> ptrs;
        for (size_t p = 0; p < m.params.size(); ++p) {
          mine.emplace_back(m.params[p].count * sizeOf(m.params[p].type), static_cast<char>(r + 1));
          ptrs.push_back(mine.back().data());
        }
        DDP_OK(f, chorusDdpJoin(red, ptrs.data()));
        // A second epoch after everyone joined works as the first did.
        DDP_OK(f, chorusDdpPrepareForBackward(red, nullptr));
        backward(f, red, m, r, 9, rng, 1, {}, false);
        DDP_OK(f, chorusDdpFinalize(red));
        checkAverages(f, red, m, r, 9, std::vector<std::vector<int>>(n, std::vector<int>(m.params.size(), 1)), n);
        DDP_OK(f, chorusDdpJoin(red, nullptr));
        DDP_OK(f, chorusDdpReducerDestroy(red));
      });
      CHECK(f.list == std::vector<std::string>{});
      for (int r = 0; r < n; ++r) {
        for (auto& bytes : models[r]) {
          CHECK(
              std::all_of(bytes.begin(), bytes.end(), [&](char c) { return c == static_cast<char>(lastJoiner + 1); }));
        }
      }
    }
  }
}

TEST_CASE("parameters broadcast from the root in chunks reach every rank", "[ddp]") {
  const int n = 3;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(14, 30, {chorusFloat32, chorusFloat64, chorusBfloat16});
  chorusDdpConfig_t cfg = CHORUS_DDP_CONFIG_INITIALIZER;
  cfg.broadcastChunkBytes = 512;  // some parameters packed together, the larger ones alone
  Failures f;
  std::vector<std::vector<std::vector<uint8_t>>> values(n);
  auto fill = [&](int r, size_t p, size_t i) { return static_cast<uint8_t>(r * 31 + p * 7 + i * 13); };
  onRanks(n, [&](int r) {
    chorusDdpReducer_t red = nullptr;
    DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
    std::vector<void*> ptrs;
    for (size_t p = 0; p < m.params.size(); ++p) {
      values[r].emplace_back(m.params[p].count * sizeOf(m.params[p].type));
      for (size_t i = 0; i < values[r][p].size(); ++i) values[r][p][i] = fill(r, p, i);
      ptrs.push_back(values[r][p].empty() ? nullptr : values[r][p].data());
    }
    DDP_OK(f, chorusDdpBroadcastParameters(red, ptrs.data(), 1));
    DDP_OK(f, chorusDdpReducerDestroy(red));
  });
  REQUIRE(f.list == std::vector<std::string>{});
  for (int r = 0; r < n; ++r) {
    for (size_t p = 0; p < m.params.size(); ++p) {
      for (size_t i = 0; i < values[r][p].size(); ++i) REQUIRE(values[r][p][i] == fill(1, p, i));
    }
  }
}

namespace {
std::string lastError() { return chorusGetLastError(nullptr); }
bool mentions(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }
}  // namespace

TEST_CASE("ranks that disagree on parameters or options are told which and where", "[ddp]") {
  const int n = 2;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(15, 8, {chorusFloat32});
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<chorusResult_t> rc(n);
    std::vector<std::string> msg(n);
    onRanks(n, [&](int r) {
      Model mine = m;
      chorusDdpConfig_t cfg = CHORUS_DDP_CONFIG_INITIALIZER;
      int count = static_cast<int>(mine.params.size());
      if (r == 1 && variant == 0) mine.params[3].count += 1;
      if (r == 1 && variant == 1) cfg.bucketCapBytes = 4096;
      if (r == 1 && variant == 2) count -= 1;
      chorusDdpReducer_t red = nullptr;
      rc[r] = chorusDdpReducerCreate(&red, w[r], mine.params.data(), count, &cfg);
      msg[r] = lastError();
      if (red) chorusDdpReducerDestroy(red);
    });
    for (int r = 0; r < n; ++r) {
      INFO("variant " << variant << " rank " << r << ": " << msg[r]);
      CHECK(rc[r] == chorusInvalidUsage);
      CHECK(mentions(msg[r], "rank 1"));
      if (variant == 0) CHECK(mentions(msg[r], "parameter 3 (layer1.bias)"));
      if (variant == 1) CHECK(mentions(msg[r], "bucketCapBytes"));
      if (variant == 2) CHECK(mentions(msg[r], "7 parameters"));
    }
  }
}

TEST_CASE("misuse of a reducer gets an error that says what to change", "[ddp]") {
  World w(1);
  REQUIRE(w.ok());
  const Model m = randomModel(16, 6, {chorusFloat32});
  const int np = static_cast<int>(m.params.size());
  chorusDdpReducer_t red = nullptr;
  chorusDdpConfig_t bad = CHORUS_DDP_CONFIG_INITIALIZER;
  bad.magic = 0;
  CHECK(chorusDdpReducerCreate(&red, w[0], m.params.data(), np, &bad) == chorusInvalidArgument);
  CHECK(mentions(lastError(), "CHORUS_DDP_CONFIG_INITIALIZER"));
  bad = CHORUS_DDP_CONFIG_INITIALIZER;
  bad.hook = 7;
  CHECK(chorusDdpReducerCreate(&red, w[0], m.params.data(), np, &bad) == chorusInvalidArgument);
  CHECK(chorusDdpReducerCreate(&red, w[0], nullptr, np, nullptr) == chorusInvalidArgument);
  CHECK(red == nullptr);
  REQUIRE(chorusDdpReducerCreate(&red, w[0], m.params.data(), np, nullptr) == chorusSuccess);

  void* g = nullptr;
  CHECK(chorusDdpGradient(red, np, &g) == chorusInvalidArgument);
  CHECK(mentions(lastError(), "out of range"));
  CHECK(chorusDdpMarkReady(red, 0) == chorusInvalidUsage);
  CHECK(mentions(lastError(), "chorusDdpPrepareForBackward"));
  CHECK(chorusDdpFinalize(red) == chorusInvalidUsage);
  CHECK(chorusDdpJoin(red, nullptr) == chorusInvalidUsage);
  CHECK(mentions(lastError(), "unevenInputs"));

  REQUIRE(chorusDdpPrepareForBackward(red, nullptr) == chorusSuccess);
  CHECK(chorusDdpMarkUnused(red, 1) == chorusInvalidUsage);
  CHECK(mentions(lastError(), "findUnusedParameters"));
  REQUIRE(chorusDdpMarkReady(red, 0) == chorusSuccess);
  CHECK(chorusDdpMarkReady(red, 0) == chorusInvalidUsage);
  CHECK(mentions(lastError(), "marked twice"));
  REQUIRE(chorusDdpMarkReady(red, 2) == chorusSuccess);
  CHECK(chorusDdpZeroGrad(red) == chorusInvalidUsage);
  // Parameters 1, 3, 4, 5 never become ready: finalize names them, and so does the next start.
  CHECK(chorusDdpFinalize(red) == chorusInvalidUsage);
  CHECK(mentions(lastError(), "1 (layer0.bias), 3 (layer1.bias), 4 (layer2.weight), 5 (layer2.bias)"));
  CHECK(chorusDdpPrepareForBackward(red, nullptr) == chorusInvalidUsage);
  CHECK(mentions(lastError(), "did not finish"));
  CHECK(mentions(lastError(), "1 (layer0.bias), 3 (layer1.bias)"));
  // Finishing the iteration recovers.
  for (int p : {1, 3, 4, 5}) REQUIRE(chorusDdpMarkReady(red, p) == chorusSuccess);
  REQUIRE(chorusDdpFinalize(red) == chorusSuccess);
  REQUIRE(chorusDdpReducerDestroy(red) == chorusSuccess);
  CHECK(chorusDdpMarkReady(red, 0) == chorusInvalidArgument);
  CHECK(mentions(lastError(), "not a live"));
  CHECK(chorusDdpReducerDestroy(red) == chorusInvalidArgument);
  CHECK(chorusDdpMarkReady(nullptr, 0) == chorusInvalidArgument);
}

namespace {

// A host function on a producer stream: waits until the test lets producers run (so every mark
// and finalize has returned before any gradient is written), then writes one gradient.
struct Produce {
  chorusDdpReducer_t red;
  const Model* m;
  int rank, iter;
  size_t p;
  std::atomic<bool>* go;
  static void run(void* arg) {
    auto* x = static_cast<Produce*>(arg);
    while (!x->go->load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    writeGrad(x->red, *x->m, x->rank, x->iter, x->p, false);
  }
};

// On the consumer stream after chorusDdpFinalizeOn: copies every gradient out.
struct Snapshot {
  chorusDdpReducer_t red;
  const Model* m;
  std::vector<std::vector<char>> bytes;
  static void run(void* arg) {
    auto* x = static_cast<Snapshot*>(arg);
    x->bytes.assign(x->m->params.size(), {});
    for (size_t p = 0; p < x->m->params.size(); ++p) {
      void* g = nullptr;
      (void)chorusDdpGradient(x->red, static_cast<int>(p), &g);
      const char* c = static_cast<const char*>(g);
      x->bytes[p].assign(c, c + x->m->params[p].count * sizeOf(x->m->params[p].type));
    }
  }
};

}  // namespace

TEST_CASE("gradients produced on streams are reduced after their producers and a consumer stream waits for them",
          "[ddp]") {
  // Each rank's gradients are written by host functions on two producer streams, held back until
  // every chorusDdpMarkReadyOn and the chorusDdpFinalizeOn of the iteration have returned: had
  // either waited for a gradient, the rank would never let its producers go (the watchdog below
  // says so). The consumer stream's copy of the gradients, taken after chorusDdpFinalizeOn, must
  // hold the averages. Three iterations: the second rebuilds the buckets, with fp16 compression on
  // the float32 buckets.
  const int n = 3;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(23, 18, {chorusFloat32, chorusFloat64, chorusInt32});
  chorusDdpConfig_t cfg = smallBuckets();
  cfg.hook = chorusDdpHookFp16;
  cfg.gradientMemory = chorusDdpMemoryHost;
  Failures f;
  const int iters = 3;
  std::vector<std::vector<int>> all(n, std::vector<int>(m.params.size(), 1));
  std::vector<int> rebuiltAt(n, -1);
  onRanks(n, [&](int r) {
    chorusDdpReducer_t red = nullptr;
    DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
    chorusStream_t producer[2] = {nullptr, nullptr};
    chorusStream_t consumer = nullptr;
    DDP_OK(f, chorusStreamCreate(&producer[0]));
    DDP_OK(f, chorusStreamCreate(&producer[1]));
    DDP_OK(f, chorusStreamCreate(&consumer));
    std::mt19937 rng(300 + r);
    for (int it = 0; it < iters; ++it) {
      int rebuilt = 0;
      DDP_OK(f, chorusDdpPrepareForBackward(red, &rebuilt));
      if (rebuilt) rebuiltAt[r] = it;
      std::atomic<bool> go{false};
      std::atomic<bool> returned{false};
      std::thread watchdog([&] {
        for (int k = 0; k < 20000 && !returned.load(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (!returned.load()) f.add("rank " + std::to_string(r) + ": a mark or finalize waited for its producers");
        go.store(true);
      });
      std::vector<int> order(m.params.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<Produce> jobs(order.size());
      for (size_t k = 0; k < order.size(); ++k) {
        const size_t p = static_cast<size_t>(order[k]);
        jobs[k] = {red, &m, r, it, p, &go};
        chorusStream_t s = producer[p % 2];
        DDP_OK(f, chorusLaunchHostFunc(s, Produce::run, &jobs[k]));
        DDP_OK(f, chorusDdpMarkReadyOn(red, static_cast<int>(p), s));
      }
      Snapshot snap{red, &m, {}};
      // The consumer is the host stream that runs the "optimizer": after the finalize it reads.
      chorusResult_t rc = chorusDdpFinalizeOn(red, consumer);
      if (rc == chorusSuccess) rc = chorusLaunchHostFunc(consumer, Snapshot::run, &snap);
      returned.store(true);
      watchdog.join();
      DDP_OK(f, rc);
      DDP_OK(f, chorusStreamSynchronize(consumer));
      DDP_OK(f, chorusStreamSynchronize(producer[0]));
      DDP_OK(f, chorusStreamSynchronize(producer[1]));
      // The snapshot against the averages: checkAverages reads the reducer's storage, which the
      // snapshot must equal bit for bit.
      checkAverages(f, red, m, r, it, all, n, 2 * epsilon(chorusFloat16));
      for (size_t p = 0; p < m.params.size(); ++p) {
        void* g = nullptr;
        (void)chorusDdpGradient(red, static_cast<int>(p), &g);
        if (snap.bytes.size() != m.params.size() ||
            (!snap.bytes[p].empty() && std::memcmp(snap.bytes[p].data(), g, snap.bytes[p].size()) != 0)) {
          f.add("rank " + std::to_string(r) + " iteration " + std::to_string(it) +
                ": the consumer stream read parameter " + std::to_string(p) + " before its reduction ended");
          break;
        }
      }
    }
    chorusDdpStats_t s;
    DDP_OK(f, chorusDdpGetStats(red, &s));
    if (s.syncedIterations != iters || s.totalCommSeconds <= 0 || s.lastExposedSeconds < 0 ||
        s.lastExposedSeconds > s.lastCommSeconds) {
      f.add("rank " + std::to_string(r) + " stats: synced " + std::to_string(s.syncedIterations) + ", comm " +
            std::to_string(s.totalCommSeconds) + ", exposed " + std::to_string(s.lastExposedSeconds));
    }
    DDP_OK(f, chorusDdpReducerDestroy(red));
    for (chorusStream_t x : {producer[0], producer[1], consumer}) DDP_OK(f, chorusStreamDestroy(x));
  });
  CHECK(f.list == std::vector<std::string>{});
  CHECK(rebuiltAt == std::vector<int>(n, 1));
}

TEST_CASE("where gradients live is checked and a stream of the wrong kind is refused", "[ddp]") {
  const Model m = randomModel(5, 4, {chorusFloat32});
  chorusDdpReducer_t red = nullptr;
  // Options are checked before anything collective: one rank of a world of one is enough.
  World w(1);
  REQUIRE(w.ok());
  chorusDdpConfig_t bad = CHORUS_DDP_CONFIG_INITIALIZER;
  bad.gradientMemory = 5;
  CHECK(chorusDdpReducerCreate(&red, w[0], m.params.data(), 4, &bad) == chorusInvalidArgument);
  CHECK_THAT(chorusGetLastError(nullptr), Catch::Contains("gradientMemory is 5; use chorusDdpMemoryHost (0)"));
  // Device gradients need a communicator with a CUDA device; this host communicator has none.
  chorusDdpConfig_t dev = CHORUS_DDP_CONFIG_INITIALIZER;
  dev.gradientMemory = chorusDdpMemoryDevice;
  CHECK(chorusDdpReducerCreate(&red, w[0], m.params.data(), 4, &dev) == chorusInvalidUsage);
  CHECK_THAT(chorusGetLastError(nullptr), Catch::Contains("the communicator has no CUDA device"));
  // A config of version 1's size (before gradientMemory) is taken, with host gradients.
  chorusDdpConfig_t v1 = CHORUS_DDP_CONFIG_INITIALIZER;
  v1.size = offsetof(chorusDdpConfig_t, gradientMemory);
  v1.gradientMemory = 12345;  // not read
  REQUIRE(chorusDdpReducerCreate(&red, w[0], m.params.data(), 4, &v1) == chorusSuccess);
  // A CUDA stream for host gradients names what to pass instead (where this build can wrap one).
  chorusStream_t cudaWrapped = nullptr;
  if (chorusStreamFromCuda(nullptr, &cudaWrapped) == chorusSuccess) {
    int rebuilt = 0;
    REQUIRE(chorusDdpPrepareForBackward(red, &rebuilt) == chorusSuccess);
    CHECK(chorusDdpMarkReadyOn(red, 0, cudaWrapped) == chorusInvalidUsage);
    CHECK_THAT(chorusGetLastError(nullptr), Catch::Contains("wraps a CUDA stream (chorusStreamFromCuda) but the "
                                                            "reducer's gradients are host memory"));
    CHECK(chorusDdpFinalizeOn(red, cudaWrapped) == chorusInvalidUsage);
    // Neither call changed anything: the iteration ends as usual.
    for (int p = 0; p < 4; ++p) CHECK(chorusDdpMarkReady(red, p) == chorusSuccess);
    CHECK(chorusDdpFinalize(red) == chorusSuccess);
    CHECK(chorusStreamDestroy(cudaWrapped) == chorusSuccess);
  }
  CHECK(chorusDdpReducerDestroy(red) == chorusSuccess);
}

namespace {

// On a consumer stream: waits 50 ms (a slow optimizer step), then copies the gradients out.
void slowSnapshot(void* arg) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Snapshot::run(arg);
}

}  // namespace

TEST_CASE("after chorusDdpFinalizeOn the gradients are zeroed only once the consumer stream has read them", "[ddp]") {
  // chorusDdpZeroGrad right after chorusDdpFinalizeOn and a slow reader on the consumer stream:
  // the reader must see the averages, not zeros, and the gradients are zero afterwards. Two
  // iterations, so the second starts after a zeroing ordered that way.
  const int n = 2;
  World w(n);
  REQUIRE(w.ok());
  const Model m = randomModel(41, 6, {chorusFloat32});
  chorusDdpConfig_t cfg = smallBuckets();
  cfg.gradientMemory = chorusDdpMemoryHost;
  Failures f;
  onRanks(n, [&](int r) {
    chorusDdpReducer_t red = nullptr;
    DDP_OK(f, chorusDdpReducerCreate(&red, w[r], m.params.data(), static_cast<int>(m.params.size()), &cfg));
    chorusStream_t consumer = nullptr;
    DDP_OK(f, chorusStreamCreate(&consumer));
    for (int it = 0; it < 2; ++it) {
      int rebuilt = 0;
      DDP_OK(f, chorusDdpPrepareForBackward(red, &rebuilt));
      for (size_t p = 0; p < m.params.size(); ++p) {
        writeGrad(red, m, r, it, p, false);
        DDP_OK(f, chorusDdpMarkReady(red, static_cast<int>(p)));
      }
      DDP_OK(f, chorusDdpFinalizeOn(red, consumer));
      Snapshot snap{red, &m, {}};
      DDP_OK(f, chorusLaunchHostFunc(consumer, slowSnapshot, &snap));
      DDP_OK(f, chorusDdpZeroGrad(red));
      DDP_OK(f, chorusStreamSynchronize(consumer));
      for (size_t p = 0; p < m.params.size() && snap.bytes.size() == m.params.size(); ++p) {
        void* g = nullptr;
        DDP_OK(f, chorusDdpGradient(red, static_cast<int>(p), &g));
        for (size_t e = 0; e < m.params[p].count; ++e) {
          const double want = (gradValue(0, it, p, e, chorusFloat32) + gradValue(1, it, p, e, chorusFloat32)) / 2;
          const double read = load(snap.bytes[p].data(), chorusFloat32, e);
          if (read != want || load(g, chorusFloat32, e) != 0) {
            f.add("rank " + std::to_string(r) + " iteration " + std::to_string(it) + " parameter " + std::to_string(p) +
                  " element " + std::to_string(e) + ": the consumer read " + std::to_string(read) + " (want " +
                  std::to_string(want) + "), after the zeroing " + std::to_string(load(g, chorusFloat32, e)));
            break;
          }
        }
      }
      if (snap.bytes.size() != m.params.size()) f.add("rank " + std::to_string(r) + ": the consumer read nothing");
    }
    DDP_OK(f, chorusDdpReducerDestroy(red));
    DDP_OK(f, chorusStreamDestroy(consumer));
  });
  CHECK(f.list == std::vector<std::string>{});
}
