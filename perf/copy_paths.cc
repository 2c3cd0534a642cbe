// What moving bytes between two processes of one host costs on this machine, by each path a
// collective could take: memcpy within a process (the shared-memory transport's copies are
// these), and process_vm_readv from another process (a single-copy path for buffers that are
// not shared). Prints GB/s per size; the child reads the parent's buffer.
//
//   copy_paths [-b MIN] [-e MAX] [-n ITERS]     sizes in bytes, factor 4; defaults 64K..64M, 50
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  size_t lo = 64 << 10;
  size_t hi = 64 << 20;
  int iters = 50;
  int opt;
  while ((opt = getopt(argc, argv, "b:e:n:")) != -1) {
    if (opt == 'b') lo = std::strtoull(optarg, nullptr, 0);
    if (opt == 'e') hi = std::strtoull(optarg, nullptr, 0);
    if (opt == 'n') iters = std::atoi(optarg);
  }
  std::vector<char> src(hi, 7);
  const pid_t parent = getpid();
  int done[2];
  if (pipe(done) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    std::vector<char> dst(hi, 0);
    std::printf("# %12s %14s %20s %8s\n", "bytes", "memcpy GB/s", "process_vm_readv GB/s", "ratio");
    for (size_t n = lo; n <= hi; n *= 4) {
      double t0 = now();
      for (int i = 0; i < iters; ++i) std::memcpy(dst.data(), src.data(), n);  // the child's copy-on-write view
      const double mem = double(n) * iters / (now() - t0) / 1e9;
      t0 = now();
      for (int i = 0; i < iters; ++i) {
        struct iovec l = {dst.data(), n};
        struct iovec r = {src.data(), n};
        if (process_vm_readv(parent, &l, 1, &r, 1, 0) != static_cast<ssize_t>(n)) {
          std::perror("process_vm_readv (needs ptrace permission over the peer)");
          _exit(1);
        }
      }
      const double cma = double(n) * iters / (now() - t0) / 1e9;
      std::printf("%14zu %14.2f %20.2f %8.2f\n", n, mem, cma, cma / mem);
    }
    std::fflush(stdout);
    _exit(dst[hi - 1] == 7 ? 0 : 2);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
