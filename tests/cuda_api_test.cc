// The CUDA side of the C API that runs without a GPU: a host-only run never loads CUDA, the
// communicator's device and its checks, CUDA stream wrappers and what they refuse. (Device
// buffers themselves: tests/device_test.cc, on a GPU.)
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "src/device/cuda.h"
#include "tests/test_util.h"

using chorus::test::hasMessage;
using chorus::test::onRanks;
using chorus::test::World;

namespace {

bool libcudaMapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libcuda.so") != std::string::npos) return true;
  }
  return false;
}

bool lastErrorSays(const char* words) { return std::strstr(chorusGetLastError(nullptr), words) != nullptr; }

}  // namespace

// Each ctest entry is a process of its own (catch_discover_tests), so nothing before this case
// can have loaded CUDA.
TEST_CASE("a host-only run never loads CUDA, and its communicators have no device", "[api][cuda][nocuda]") {
  REQUIRE_FALSE(libcudaMapped());
  World w(2);
  REQUIRE(w.ok());
  auto rc = onRanks(2, [&](int r) {
    std::vector<float> in(1000, float(r + 1));
    std::vector<float> out(1000, 0.0f);
    chorusResult_t res = chorusAllReduce(in.data(), out.data(), in.size(), chorusFloat32, chorusSum, w[r], nullptr);
    for (float v : out) {
      if (v != 3.0f) return chorusInternalError;
    }
    return res;
  });
  CHECK(rc == std::vector<chorusResult_t>(2, chorusSuccess));
  int dev = 7;
  REQUIRE(chorusCommCuDevice(w[0], &dev) == chorusSuccess);
  CHECK(dev == -1);
  CHECK_FALSE(chorus::cuda::driverLoaded());
  if (libcudaMapped()) {
    // What came with it, to find who loaded it: the GPU vendors' libraries and plugins mapped.
    std::ifstream maps("/proc/self/maps");
    std::string line, seen;
    while (std::getline(maps, line)) {
      const size_t at = line.find('/');
      if (at == std::string::npos) continue;
      const std::string path = line.substr(at);
      if (seen.find(path) == std::string::npos &&
          (path.find("nvidia") != std::string::npos || path.find("cuda") != std::string::npos ||
           path.find("OpenCL") != std::string::npos || path.find("hwloc") != std::string::npos)) {
        seen += path + "\n";
      }
    }
    FAIL_CHECK("libcuda is mapped; with it:\n" << seen);
  }
  // Where a libcuda could have been loaded all along (a machine with a driver, or the toolkit's
  // stub on LD_LIBRARY_PATH: ctest's cuda_host_only_stub), the checks above mean something; say
  // so last, since this loads it.
  if (std::getenv("CHORUS_TEST_EXPECT_LIBCUDA")) {
    CHECK(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr);
    CHECK(libcudaMapped());
  }
}

TEST_CASE("a communicator's CUDA device is checked at init", "[api][cuda]") {
  chorusUniqueId id;
  REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  chorusComm_t comm = nullptr;
  config.cudaDevice = -3;
  CHECK(chorusCommInitRankConfig(&comm, 1, id, 0, &config) == chorusInvalidArgument);
  CHECK(lastErrorSays("cudaDevice"));
  CHECK(comm == nullptr);
  // No machine has device 999: the sentence says which devices there are (or that there are none).
  config.cudaDevice = 999;
  const chorusResult_t rc = chorusCommInitRankConfig(&comm, 1, id, 0, &config);
  CHECK((rc == chorusInvalidArgument || rc == chorusInvalidUsage));
  CHECK(lastErrorSays("999"));
  CHECK(comm == nullptr);
  int devlist[2] = {0, -1};
  chorusComm_t comms[2] = {};
  CHECK(chorusCommInitAll(comms, 2, devlist) == chorusInvalidArgument);
  CHECK(lastErrorSays("devlist[1]"));
}

TEST_CASE("a CUDA stream wrapper stands for its CUDA stream and refuses host work", "[api][cuda]") {
  chorusStream_t s = nullptr;
  if (!chorus::cuda::built()) {
    CHECK(chorusStreamFromCuda(nullptr, &s) == chorusInvalidUsage);
    CHECK(lastErrorSays("no CUDA"));
    return;
  }
  CHECK(chorusStreamFromCuda(nullptr, nullptr) == chorusInvalidArgument);
  // A made-up CUDA stream value: wrapping it does not touch CUDA, and nothing below runs on it.
  auto* fake = reinterpret_cast<CUstream_st*>(uintptr_t(0x1000));
  REQUIRE(chorusStreamFromCuda(fake, &s) == chorusSuccess);
  CUstream_st* back = nullptr;
  REQUIRE(chorusStreamGetCuda(s, &back) == chorusSuccess);
  CHECK(back == fake);
  chorusStream_t host = nullptr;
  REQUIRE(chorusStreamCreate(&host) == chorusSuccess);
  CHECK(chorusStreamGetCuda(host, &back) == chorusInvalidArgument);
  CHECK(lastErrorSays("host stream"));
  CHECK(chorusStreamGetCuda(nullptr, &back) == chorusInvalidArgument);
  chorusEvent_t e = nullptr;
  REQUIRE(chorusEventCreate(&e) == chorusSuccess);
  CHECK(chorusEventRecord(e, s) == chorusInvalidArgument);
  CHECK(lastErrorSays("cudaEventRecord"));
  CHECK(chorusStreamWaitEvent(s, e) == chorusInvalidArgument);
  CHECK(chorusLaunchHostFunc(
            s, [](void*) {}, nullptr) == chorusInvalidArgument);
  World w(1);
  REQUIRE(w.ok());
  std::vector<float> buf(16, 1.0f);
  CHECK(chorusAllReduce(buf.data(), buf.data(), buf.size(), chorusFloat32, chorusSum, w[0], s) ==
        chorusInvalidArgument);
  CHECK(lastErrorSays("host memory"));
  // No buffer (count 0) on a wrapper is a device operation: never queued on the wrapper, which has
  // no worker (the communicator's destroy below would wait for it forever). It moves nothing, so
  // nothing is enqueued at all (the made-up CUDA stream is never touched).
  CHECK(chorusAllReduce(nullptr, nullptr, 0, chorusFloat32, chorusSum, w[0], s) == chorusSuccess);
  int source = -1;
  CHECK(chorusRecvAny(buf.data(), buf.size(), chorusFloat32, &source, w[0], s) != chorusSuccess);
  CHECK(hasMessage());
  CHECK(buf == std::vector<float>(16, 1.0f));
  CHECK(chorusEventDestroy(e) == chorusSuccess);
  CHECK(chorusStreamDestroy(host) == chorusSuccess);
  // Destroying the wrapper leaves the CUDA stream alone (it would fault on a made-up one).
  CHECK(chorusStreamDestroy(s) == chorusSuccess);
}
