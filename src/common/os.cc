#include "src/common/os.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace chorus {

void checkFailed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "chorus: internal invariant broken: %s at %s:%d\n", cond, file, line);
  std::abort();
}

std::string describeFdLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return "the descriptor limit is unknown";
  std::string text;
  // Counted by probing: opening /proc/self/fd would need a descriptor, which may be what is missing.
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur <= 65536) {
    int open = 0;
    for (int fd = 0; fd < static_cast<int>(rl.rlim_cur); ++fd) open += ::fcntl(fd, F_GETFD) != -1;
    text = std::to_string(open) + " descriptors open, ";
  }
  text += "the limit is " + (rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_cur)) +
          " (ulimit -n; the hard limit is " +
          (rl.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_max)) + ")";
  return text;
}

Status errnoStatus(const std::string& what, int err) {
  if (err == EMFILE) {
    return systemError(what + ": too many open files: " + describeFdLimit() + "; a rank holds about " +
                       std::to_string(kFdsPerRank) +
                       " and two per peer in another process: raise the limit (ulimit -n) or run fewer ranks per "
                       "process");
  }
  if (err == ENFILE) {
    return systemError(what + ": too many open files in the system (the kernel's limit, /proc/sys/fs/file-max)");
  }
  return systemError(what + ": " + std::strerror(err));
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Result<Mapping> Mapping::map(int fd, size_t bytes) {
  int flags = fd >= 0 ? MAP_SHARED : (MAP_SHARED | MAP_ANONYMOUS);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) return errnoStatus("mmap of " + std::to_string(bytes) + " bytes", errno);
  Mapping m;
  m.data_ = p;
  m.size_ = bytes;
  return m;
}

void Mapping::reset() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Result<UniqueFd> makeMemfd(const char* name, size_t bytes) {
  UniqueFd fd(static_cast<int>(::syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!fd.valid()) return errnoStatus("memfd_create", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return errnoStatus("ftruncate of a shared-memory segment to " + std::to_string(bytes) + " bytes", errno);
  }
  (void)::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  return fd;
}

Result<UniqueFd> dupFd(int fd) {
  UniqueFd d(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!d.valid()) return errnoStatus("dup of a shared-memory descriptor", errno);
  return d;
}

Result<size_t> fileSize(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errnoStatus("fstat of a shared-memory descriptor", errno);
  return static_cast<size_t>(st.st_size);
}

void futexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeoutNs) {
  struct timespec ts;
  ts.tv_sec = timeoutNs / 1000000000;
  ts.tv_nsec = timeoutNs % 1000000000;
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::string hostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

UniqueFd openPidfd(int pid) {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    (void)::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return UniqueFd(static_cast<int>(fd));
  }
#else
  (void)pid;
#endif
  return UniqueFd();
}

bool pidfdExited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

uint64_t processStartTicks(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count from the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

char processState(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return 0;
  return line[close + 2];
}

uint64_t pidSpaceId() {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, id);
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0) id += "|" + std::to_string(st.st_ino) + "|" + std::to_string(st.st_dev);
  return fnv1a(id.data(), id.size());
}

uint64_t randomU64() {
  uint64_t v = 0;
  char* p = reinterpret_cast<char*>(&v);
  size_t got = 0;
  while (got < sizeof(v)) {
    ssize_t r = ::getrandom(p + got, sizeof(v) - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      checkFailed("getrandom succeeds", __FILE__, __LINE__);
    }
    got += static_cast<size_t>(r);
  }
  return v;
}

int freeTcpPort(bool loopback) {
  int low = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (!(range >> low) || low <= 1024) low = 32768;
  const int from = low > 21000 ? 20000 : 1024;
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = from + static_cast<int>(randomU64() % static_cast<uint64_t>(low - from));
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return -1;
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return port;
  }
  return -1;
}

void setThreadName(const char* name) { ::pthread_setname_np(::pthread_self(), name); }

void makePrivateFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) return;
  // Only a regular file of this user's: never a device (/dev/null, /dev/stderr's target) or a file
  // someone else owns.
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) (void)::fchmod(fd, 0600);
  ::close(fd);
}

}  // namespace chorus
