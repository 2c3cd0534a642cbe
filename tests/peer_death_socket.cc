// A peer fails in the middle of 64 MiB all-reduces over sockets, where the socket proxy sends from
// and receives into the caller's buffers:
//   peer_death_socket kill   rank 1 dies (SIGKILL): rank 0's call fails promptly, naming rank 1;
//   peer_death_socket stop   rank 1 stops (SIGSTOP): rank 0's call times out (CHORUS_TIMEOUT=2),
//                            naming rank 1; then rank 1 is resumed and sends the rest of its data.
// Either way, once the failed call has returned nothing may write into the buffers rank 0 then
// frees: fresh memory mapped in their place keeps its pattern while rank 1 (when stopped, now
// running again) carries on. Abort returns promptly. One process per rank: this program forks
// rank 1 and is rank 0 itself.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "chorus/chorus.h"
#include "src/common/os.h"

namespace {

constexpr size_t kCount = size_t(16) << 20;  // 64 MiB of floats
constexpr size_t kBytes = kCount * sizeof(float);

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int fail(const std::string& why) {
  std::fprintf(stderr, "FAIL: %s\n", why.c_str());
  return 1;
}

float* mapBuffer() {
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::exit(2);
  return static_cast<float*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  const bool stop = argc > 1 && std::string(argv[1]) == "stop";
  const int port = chorus::freeTcpPort(true);
  if (port < 0) return 2;
  setenv("CHORUS_COMM_ID", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  setenv("CHORUS_SHM_DISABLE", "1", 1);            // sockets between the two processes
  setenv("CHORUS_TIMEOUT", stop ? "2" : "60", 1);  // noticing a death must not wait for this
  const unsigned seed = static_cast<unsigned>(getpid());
  const int dieAfterMs = 150 + static_cast<int>(seed % 400);
  std::printf("seed %u: rank 1 %s %d ms into its all-reduces\n", seed, stop ? "stops" : "dies", dieAfterMs);
  std::fflush(stdout);
  chorusUniqueId id;
  if (chorusGetUniqueId(&id) != chorusSuccess) return fail("chorusGetUniqueId");

  const pid_t child = fork();
  if (child == 0) {
    chorusComm_t comm;
    if (chorusCommInitRank(&comm, 2, id, 1) != chorusSuccess) _exit(3);
    float* a = mapBuffer();
    for (size_t i = 0; i < kCount; ++i) a[i] = 1.0f;
    std::thread([dieAfterMs, stop] {
      std::this_thread::sleep_for(std::chrono::milliseconds(dieAfterMs));
      raise(stop ? SIGSTOP : SIGKILL);
    }).detach();
    for (;;) chorusAllReduce(a, a, kCount, chorusFloat32, chorusSum, comm, nullptr);
  }

  chorusComm_t comm;
  if (chorusCommInitRank(&comm, 2, id, 0) != chorusSuccess) return fail("rank 0 init");
  float* send = mapBuffer();
  float* recv = mapBuffer();
  for (size_t i = 0; i < kCount; ++i) send[i] = 2.0f;
  chorusResult_t r = chorusSuccess;
  int done = 0;
  while (r == chorusSuccess && done < 100000) {
    r = chorusAllReduce(send, recv, kCount, chorusFloat32, chorusSum, comm, nullptr);
    ++done;
  }
  const double failedAt = now();
  const std::string msg = chorusGetLastError(comm);
  std::printf("after %d all-reduces: %s (%s)\n", done - 1, chorusGetErrorString(r), msg.c_str());
  if (msg.find("rank 1") == std::string::npos) return fail("the message does not name rank 1");
  int status = 0;
  if (stop) {
    if (r == chorusSuccess || r == chorusInProgress) return fail("no error while rank 1 was stopped");
  } else {
    waitpid(child, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) return fail("rank 1 did not die by SIGKILL");
    if (r != chorusRemoteError && r != chorusSystemError) return fail("the error code is not remote or system");
  }

  // The buffers the failed call used go back to the system, and fresh memory takes their place
  // (usually at the same addresses). Nothing of this communicator may write there any more.
  munmap(send, kBytes);
  munmap(recv, kBytes);
  float* fresh[2] = {mapBuffer(), mapBuffer()};
  for (float* f : fresh) std::memset(f, 0x5a, kBytes);
  if (stop) kill(child, SIGCONT);  // rank 1 goes on sending the operation rank 0 gave up
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (stop) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  for (float* f : fresh) {
    const auto* b = reinterpret_cast<const unsigned char*>(f);
    for (size_t i = 0; i < kBytes; ++i) {
      if (b[i] != 0x5a) return fail("byte " + std::to_string(i) + " of freed-and-remapped memory was written");
    }
  }
  const double t0 = now();
  if (chorusCommAbort(comm) != chorusSuccess) return fail("chorusCommAbort");
  if (now() - t0 > 5) return fail("chorusCommAbort took more than 5 s");
  std::printf("freed memory untouched for %.2f s after the failure; abort took %.3f s\n", t0 - failedAt, now() - t0);
  return 0;
}
