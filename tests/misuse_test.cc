// Every function of the C API with every kind of bad argument it can be given: each call returns
// the expected chorusResult_t with a message that names the problem, nothing crashes, and nothing
// is written to memory the call was not given (buffers and out-parameters carry sentinels that
// must survive). The communicators stay usable afterwards.
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "tests/test_util.h"

using chorus::test::World;

namespace {

std::string lastError() { return chorusGetLastError(nullptr); }

// Runs `call`, expects `code` and a message containing `says`.
#define EXPECT_BAD(call, code, says)                     \
  do {                                                   \
    const chorusResult_t rc_ = (call);                   \
    INFO(#call << " -> " << rc_ << ": " << lastError()); \
    CHECK(rc_ == (code));                                \
    CHECK(lastError().find(says) != std::string::npos);  \
  } while (0)

constexpr unsigned char kSentinel = 0xA5;

struct Sentinel {
  std::vector<unsigned char> bytes = std::vector<unsigned char>(4096, kSentinel);
  void* p() { return bytes.data(); }
  bool intact() const {
    for (unsigned char b : bytes) {
      if (b != kSentinel) return false;
    }
    return true;
  }
};

}  // namespace

TEST_CASE("every API function refuses bad arguments with the right code and a message", "[api][misuse][sweep]") {
  World w(2);
  REQUIRE(w.ok());
  chorusComm_t c = w[0];
  Sentinel send, recv;
  float* sb = static_cast<float*>(send.p());
  float* rb = static_cast<float*>(recv.p());
  const size_t huge = SIZE_MAX / 2;  // its byte size overflows

  // A handle that was destroyed, and ones that never were.
  chorusComm_t destroyed = nullptr;
  {
    World gone(1);
    REQUIRE(gone.ok());
    destroyed = gone.release(0);
    REQUIRE(chorusCommDestroy(destroyed) == chorusSuccess);
  }
  alignas(64) unsigned char zeros[256] = {0};
  alignas(64) unsigned char noise[256];
  for (size_t i = 0; i < sizeof(noise); ++i) noise[i] = static_cast<unsigned char>(i * 37 + 11);
  const chorusComm_t fakes[] = {destroyed, reinterpret_cast<chorusComm_t>(zeros),
                                reinterpret_cast<chorusComm_t>(noise)};

  SECTION("version, ids, error strings") {
    EXPECT_BAD(chorusGetVersion(nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusGetUniqueId(nullptr), chorusInvalidArgument, "NULL");
    CHECK(std::strlen(chorusGetErrorString(static_cast<chorusResult_t>(12345))) > 0);
    CHECK(std::strlen(chorusGetErrorString(static_cast<chorusResult_t>(-1))) > 0);
    CHECK(chorusGetLastError(reinterpret_cast<chorusComm_t>(noise)) != nullptr);
  }

  SECTION("init") {
    chorusUniqueId id;
    REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
    chorusComm_t out = reinterpret_cast<chorusComm_t>(send.p());
    EXPECT_BAD(chorusCommInitRank(nullptr, 2, id, 0), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusCommInitRank(&out, 0, id, 0), chorusInvalidArgument, "nranks");
    EXPECT_BAD(chorusCommInitRank(&out, -3, id, 0), chorusInvalidArgument, "nranks");
    EXPECT_BAD(chorusCommInitRank(&out, 2, id, 2), chorusInvalidArgument, "rank");
    EXPECT_BAD(chorusCommInitRank(&out, 2, id, -1), chorusInvalidArgument, "rank");
    chorusUniqueId garbage;
    std::memset(&garbage, 0x5a, sizeof(garbage));
    EXPECT_BAD(chorusCommInitRank(&out, 2, garbage, 0), chorusInvalidArgument, "chorusUniqueId");
    chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
    config.magic = 0x1234;
    EXPECT_BAD(chorusCommInitRankConfig(&out, 2, id, 0, &config), chorusInvalidArgument, "config");
    config = CHORUS_CONFIG_INITIALIZER;
    config.blocking = 7;
    EXPECT_BAD(chorusCommInitRankConfig(&out, 2, id, 0, &config), chorusInvalidArgument, "blocking");
    config = CHORUS_CONFIG_INITIALIZER;
    config.timeoutSeconds = -5;
    EXPECT_BAD(chorusCommInitRankConfig(&out, 2, id, 0, &config), chorusInvalidArgument, "timeout");
    EXPECT_BAD(chorusCommInitAll(nullptr, 2, nullptr), chorusInvalidArgument, "NULL");
    chorusComm_t many[2] = {nullptr, nullptr};
    EXPECT_BAD(chorusCommInitAll(many, 0, nullptr), chorusInvalidArgument, "ndev");
    EXPECT_BAD(chorusCommInitAll(many, -1, nullptr), chorusInvalidArgument, "ndev");
    EXPECT_BAD(chorusCommInitFromEnv(nullptr, nullptr), chorusInvalidArgument, "NULL");
    CHECK(send.intact());
  }

  SECTION("a destroyed or never initialised communicator, in every function that takes one") {
    int value = 77;
    void* handle = &value;
    chorusComm_t child = nullptr;
    for (chorusComm_t f : fakes) {
      INFO("handle " << static_cast<const void*>(f));
      const char* says = "not a live communicator";
      EXPECT_BAD(chorusCommFinalize(f), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommDestroy(f), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommAbort(f), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommSplit(f, 0, 0, &child, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommShrink(f, nullptr, 0, &child, nullptr, CHORUS_SHRINK_DEFAULT), chorusInvalidArgument, says);
      chorusResult_t async = chorusSuccess;
      EXPECT_BAD(chorusCommGetAsyncError(f, &async), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommDumpState(f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommCount(f, &value), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommCuDevice(f, &value), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommUserRank(f, &value), chorusInvalidArgument, says);
      EXPECT_BAD(chorusCommRegister(f, rb, 64, &handle), chorusInvalidArgument, says);
      CHECK(handle == nullptr);  // an out-parameter is cleared on failure
      handle = &value;
      EXPECT_BAD(chorusCommDeregister(f, handle), chorusInvalidArgument, says);
      chorusRedOp_t op = chorusSum;
      float scalar = 2;
      EXPECT_BAD(chorusRedOpCreatePreMulSum(&op, &scalar, chorusFloat32, chorusScalarHostImmediate, f),
                 chorusInvalidArgument, says);
      EXPECT_BAD(chorusRedOpDestroy(static_cast<chorusRedOp_t>(chorusNumOps), f), chorusInvalidArgument, says);
      EXPECT_BAD(chorusAllReduce(sb, rb, 4, chorusFloat32, chorusSum, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusBroadcast(sb, rb, 4, chorusFloat32, 0, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusBcast(rb, 4, chorusFloat32, 0, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusReduce(sb, rb, 4, chorusFloat32, chorusSum, 0, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusAllGather(sb, rb, 4, chorusFloat32, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusReduceScatter(sb, rb, 4, chorusFloat32, chorusSum, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusAlltoAll(sb, rb, 4, chorusFloat32, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusGather(sb, rb, 4, chorusFloat32, 0, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusScatter(sb, rb, 4, chorusFloat32, 0, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusSend(sb, 4, chorusFloat32, 1, f, nullptr), chorusInvalidArgument, says);
      EXPECT_BAD(chorusRecv(rb, 4, chorusFloat32, 1, f, nullptr), chorusInvalidArgument, says);
      CHECK(value == 77);
      CHECK(child == nullptr);
      CHECK(async == chorusSuccess);
      CHECK(op == chorusSum);
    }
    CHECK(recv.intact());
  }

  SECTION("collectives: null buffers, unknown type or op, roots and peers out of range, overflowing counts") {
    const auto badType = static_cast<chorusDataType_t>(99);
    const auto negType = static_cast<chorusDataType_t>(-1);
    const auto badOp = static_cast<chorusRedOp_t>(77);
    // All-reduce, reduce-scatter, all-gather, all-to-all: both buffers, everywhere.
    EXPECT_BAD(chorusAllReduce(nullptr, rb, 4, chorusFloat32, chorusSum, c, nullptr), chorusInvalidArgument,
               "sendbuff");
    EXPECT_BAD(chorusAllReduce(sb, nullptr, 4, chorusFloat32, chorusSum, c, nullptr), chorusInvalidArgument,
               "recvbuff");
    EXPECT_BAD(chorusAllReduce(sb, rb, 4, badType, chorusSum, c, nullptr), chorusInvalidArgument, "datatype");
    EXPECT_BAD(chorusAllReduce(sb, rb, 4, negType, chorusSum, c, nullptr), chorusInvalidArgument, "datatype");
    EXPECT_BAD(chorusAllReduce(sb, rb, 4, chorusFloat32, badOp, c, nullptr), chorusInvalidArgument, "op");
    EXPECT_BAD(chorusAllReduce(sb, rb, huge, chorusFloat32, chorusSum, c, nullptr), chorusInvalidArgument, "count");
    EXPECT_BAD(chorusReduceScatter(nullptr, rb, 4, chorusFloat32, chorusSum, c, nullptr), chorusInvalidArgument,
               "sendbuff");
    EXPECT_BAD(chorusReduceScatter(sb, rb, 4, chorusFloat32, badOp, c, nullptr), chorusInvalidArgument, "op");
    EXPECT_BAD(chorusReduceScatter(sb, rb, huge, chorusFloat32, chorusSum, c, nullptr), chorusInvalidArgument, "count");
    EXPECT_BAD(chorusAllGather(sb, nullptr, 4, chorusFloat32, c, nullptr), chorusInvalidArgument, "recvbuff");
    EXPECT_BAD(chorusAllGather(sb, rb, 4, badType, c, nullptr), chorusInvalidArgument, "datatype");
    EXPECT_BAD(chorusAllGather(sb, rb, huge, chorusFloat32, c, nullptr), chorusInvalidArgument, "count");
    EXPECT_BAD(chorusAlltoAll(nullptr, rb, 4, chorusFloat32, c, nullptr), chorusInvalidArgument, "sendbuff");
    EXPECT_BAD(chorusAlltoAll(sb, rb, huge, chorusFloat32, c, nullptr), chorusInvalidArgument, "count");
    // Rooted ones: the root in range, and the root's buffer.
    for (int root : {-1, 2, INT_MAX}) {
      EXPECT_BAD(chorusBroadcast(sb, rb, 4, chorusFloat32, root, c, nullptr), chorusInvalidArgument, "root");
      EXPECT_BAD(chorusBcast(rb, 4, chorusFloat32, root, c, nullptr), chorusInvalidArgument, "root");
      EXPECT_BAD(chorusReduce(sb, rb, 4, chorusFloat32, chorusSum, root, c, nullptr), chorusInvalidArgument, "root");
      EXPECT_BAD(chorusGather(sb, rb, 4, chorusFloat32, root, c, nullptr), chorusInvalidArgument, "root");
      EXPECT_BAD(chorusScatter(sb, rb, 4, chorusFloat32, root, c, nullptr), chorusInvalidArgument, "root");
    }
    EXPECT_BAD(chorusBroadcast(nullptr, rb, 4, chorusFloat32, 0, c, nullptr), chorusInvalidArgument, "sendbuff");
    EXPECT_BAD(chorusReduce(sb, nullptr, 4, chorusFloat32, chorusSum, 0, c, nullptr), chorusInvalidArgument,
               "recvbuff");
    EXPECT_BAD(chorusReduce(sb, rb, 4, chorusFloat32, badOp, 0, c, nullptr), chorusInvalidArgument, "op");
    EXPECT_BAD(chorusGather(sb, nullptr, 4, chorusFloat32, 0, c, nullptr), chorusInvalidArgument, "recvbuff");
    EXPECT_BAD(chorusScatter(nullptr, rb, 4, chorusFloat32, 0, c, nullptr), chorusInvalidArgument, "sendbuff");
    EXPECT_BAD(chorusGather(sb, rb, huge, chorusFloat32, 0, c, nullptr), chorusInvalidArgument, "count");
    // Point-to-point: the peer in range, the buffer.
    for (int peer : {-1, 2, INT_MIN}) {
      EXPECT_BAD(chorusSend(sb, 4, chorusFloat32, peer, c, nullptr), chorusInvalidArgument, "peer");
      EXPECT_BAD(chorusRecv(rb, 4, chorusFloat32, peer, c, nullptr), chorusInvalidArgument, "peer");
    }
    EXPECT_BAD(chorusSend(nullptr, 4, chorusFloat32, 1, c, nullptr), chorusInvalidArgument, "sendbuff");
    EXPECT_BAD(chorusRecv(nullptr, 4, chorusFloat32, 1, c, nullptr), chorusInvalidArgument, "recvbuff");
    EXPECT_BAD(chorusSend(sb, huge, chorusFloat32, 1, c, nullptr), chorusInvalidArgument, "count");
    EXPECT_BAD(chorusRecv(rb, 4, badType, 1, c, nullptr), chorusInvalidArgument, "datatype");
    CHECK(send.intact());
    CHECK(recv.intact());
  }

  SECTION("custom operators: after destroy, on another type or communicator, bad arguments") {
    float scalar = 2.0f;
    chorusRedOp_t op = chorusSum;
    EXPECT_BAD(chorusRedOpCreatePreMulSum(nullptr, &scalar, chorusFloat32, chorusScalarHostImmediate, c),
               chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusRedOpCreatePreMulSum(&op, nullptr, chorusFloat32, chorusScalarHostImmediate, c),
               chorusInvalidArgument, "scalar");
    EXPECT_BAD(
        chorusRedOpCreatePreMulSum(&op, &scalar, static_cast<chorusDataType_t>(42), chorusScalarHostImmediate, c),
        chorusInvalidArgument, "datatype");
    EXPECT_BAD(chorusRedOpCreatePreMulSum(&op, &scalar, chorusFloat32, static_cast<chorusScalarResidence_t>(9), c),
               chorusInvalidArgument, "residence");
    CHECK(op == chorusSum);
    REQUIRE(chorusRedOpCreatePreMulSum(&op, &scalar, chorusFloat32, chorusScalarHostImmediate, c) == chorusSuccess);
    EXPECT_BAD(chorusAllReduce(sb, rb, 4, chorusInt32, op, c, nullptr), chorusInvalidArgument, "");
    EXPECT_BAD(chorusAllReduce(sb, rb, 4, chorusFloat32, op, w[1], nullptr), chorusInvalidArgument, "");
    REQUIRE(chorusRedOpDestroy(op, c) == chorusSuccess);
    EXPECT_BAD(chorusAllReduce(sb, rb, 4, chorusFloat32, op, c, nullptr), chorusInvalidArgument, "");
    EXPECT_BAD(chorusRedOpDestroy(op, c), chorusInvalidArgument, "");
    EXPECT_BAD(chorusRedOpDestroy(chorusSum, c), chorusInvalidArgument, "");
    CHECK(recv.intact());
  }

  SECTION("groups, queries, registration, memory") {
    EXPECT_BAD(chorusGroupEnd(), chorusInvalidUsage, "chorusGroupStart");
    EXPECT_BAD(chorusCommCount(c, nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusCommUserRank(c, nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusCommCuDevice(c, nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusCommGetAsyncError(c, nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusCommDumpState(c, "/nonexistent-dir/state.txt"), chorusSystemError, "/nonexistent-dir");
    chorusComm_t child = reinterpret_cast<chorusComm_t>(send.p());
    EXPECT_BAD(chorusCommSplit(c, 0, 0, nullptr, nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusCommSplit(c, -7, 0, &child, nullptr), chorusInvalidArgument, "color");
    void* handle = nullptr;
    EXPECT_BAD(chorusCommRegister(c, nullptr, 64, &handle), chorusInvalidArgument, "");
    EXPECT_BAD(chorusCommRegister(c, rb, 64, nullptr), chorusInvalidArgument, "");
    int notAHandle = 0;
    EXPECT_BAD(chorusCommDeregister(c, &notAHandle), chorusInvalidArgument, "");
    EXPECT_BAD(chorusMemAlloc(nullptr, 64), chorusInvalidArgument, "NULL");
    void* mem = send.p();
    EXPECT_BAD(chorusMemAlloc(&mem, huge), chorusSystemError, "");
    CHECK(mem == nullptr);  // an out-parameter is cleared on failure
    EXPECT_BAD(chorusMemAlloc(&mem, 0), chorusInvalidArgument, "size");
    EXPECT_BAD(chorusMemFree(rb), chorusInvalidArgument, "");
    CHECK(recv.intact());
    CHECK(send.intact());
  }

  SECTION("streams and events") {
    EXPECT_BAD(chorusStreamCreate(nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusEventCreate(nullptr), chorusInvalidArgument, "NULL");
    chorusStream_t s;
    REQUIRE(chorusStreamCreate(&s) == chorusSuccess);
    EXPECT_BAD(chorusLaunchHostFunc(s, nullptr, nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusEventRecord(nullptr, s), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusEventQuery(nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusEventSynchronize(nullptr), chorusInvalidArgument, "NULL");
    EXPECT_BAD(chorusStreamWaitEvent(s, nullptr), chorusInvalidArgument, "NULL");
    CHECK(chorusStreamDestroy(s) == chorusSuccess);
  }

  // Nothing above harmed the communicators.
  std::vector<int> v(2, 5);
  std::vector<std::thread> t;
  std::vector<chorusResult_t> rc(2);
  for (int r = 0; r < 2; ++r) {
    t.emplace_back([&, r] { rc[r] = chorusAllReduce(&v[r], &v[r], 1, chorusInt32, chorusSum, w[r], nullptr); });
  }
  for (auto& x : t) x.join();
  CHECK(rc[0] == chorusSuccess);
  CHECK(rc[1] == chorusSuccess);
  CHECK(v[0] == 10);
  CHECK(v[1] == 10);
}
