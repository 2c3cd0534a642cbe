// Strangers on every TCP listener of a job: the bootstrap root, each rank's bootstrap listener and
// the net transport's listeners (each open until its connection is accepted) while the
// communicator is being built and while it runs collectives over sockets. A stranger thread finds this process's
// listening sockets in /proc and keeps opening connections that send nothing, garbage, a header
// with a wrong secret, half a header, a huge claimed length, or that connect and close at once.
// The communicator must be unharmed: init, an all-reduce, a broadcast and an all-gather over
// sockets, every element checked, and a clean destroy; the listeners must have logged the drops.
//
//   strangers [NRANKS]    (ranks are threads of this process; CHORUS_P2P_DISABLE and
//                          CHORUS_SHM_DISABLE make them talk over TCP)
//   strangers flood       another process holds 1100 idle connections to each rank's listener
//                          while this one has 1024 descriptors: the listeners must not spin or run
//                          out of descriptors, chorusCommSplit and an all-reduce on the new
//                          communicator must work, and the warnings must stay few.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace {

// Ports of the TCP sockets this process listens on (IPv4 and IPv6).
std::set<int> listeningPorts() {
  std::set<std::string> inodes;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char link[256] = {0};
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      if (readlink(path.c_str(), link, sizeof(link) - 1) > 0 && std::strncmp(link, "socket:[", 8) == 0) {
        inodes.insert(std::string(link + 8, std::strlen(link) - 9));
      }
    }
    closedir(d);
  }
  std::set<int> ports;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string sl, local, remote, state, queues, tr, retr, uid, timeout, inode;
      in >> sl >> local >> remote >> state >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
      ports.insert(static_cast<int>(std::strtol(local.substr(local.find(':') + 1).c_str(), nullptr, 16)));
    }
  }
  return ports;
}

// A bootstrap message header as a stranger would forge it: the right magic, the wrong secret.
std::string forgedHeader(uint32_t kind, uint64_t len) {
  struct {
    uint32_t magic, kind;
    uint64_t secret[2], clique;
    int32_t src, pad;
    uint64_t tag, len;
  } h{0x43484d53, kind, {1, 2}, 3, 0, 0, 4, len};
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

struct Stranger {
  std::atomic<bool> stop{false};
  std::atomic<int> visits{0};
  std::vector<int> held;  // connections that send nothing, kept open
  std::thread thread;

  void start(const std::vector<std::string>& hosts) {
    thread = std::thread([this, hosts] {
      std::mt19937 rng(12345);
      while (!stop.load()) {
        for (int port : listeningPorts()) {
          for (int kind = 0; kind < 6; ++kind) {
            int fd = -1;
            for (const std::string& h : hosts) {
              fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              sockaddr_in a{};
              a.sin_family = AF_INET;
              a.sin_port = htons(static_cast<uint16_t>(port));
              inet_pton(AF_INET, h.c_str(), &a.sin_addr);
              if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) break;
              ::close(fd);
              fd = -1;
            }
            if (fd < 0) continue;
            visits.fetch_add(1);
            std::string bytes;
            switch (kind) {
              case 0:  // nothing: held open until the end
                if (held.size() < 64) {
                  held.push_back(fd);
                  fd = -1;
                }
                break;
              case 1:  // garbage
                for (int i = 0; i < 300; ++i) bytes += static_cast<char>(rng());
                break;
              case 2:  // a wrong secret
                bytes = forgedHeader(1, 5) + "hello";
                break;
              case 3:  // half a header, then gone
                bytes = forgedHeader(1, 0).substr(0, 20);
                break;
              case 4:  // a huge length
                bytes = forgedHeader(1, uint64_t(1) << 40);
                break;
              default:  // connect and close
                break;
            }
            if (fd >= 0) {
              if (!bytes.empty()) (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
              ::close(fd);
            }
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  void finish() {
    stop = true;
    thread.join();
    for (int fd : held) ::close(fd);
  }
};

// This host's IPv4 addresses, loopback first: listeners bind the interface toward the root.
std::vector<std::string> localAddresses() {
  std::vector<std::string> out{"127.0.0.1"};
  std::ifstream f("/proc/net/fib_trie");
  std::string line, last;
  while (std::getline(f, line)) {
    if (line.find("/32 host LOCAL") != std::string::npos) {
      std::istringstream in(last);
      std::string dash, ip;
      in >> dash >> ip;
      bool seen = false;
      for (auto& o : out) seen = seen || o == ip;
      if (!seen && !ip.empty()) out.push_back(ip);
    }
    last = line;
  }
  return out;
}

double cpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int flood() {
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::printf("FAIL: %s\n", what.c_str());
      ++failures;
    }
  };
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  const rlim_t hard = rl.rlim_max;
  rl.rlim_cur = std::min<rlim_t>(1024, hard);
  setrlimit(RLIMIT_NOFILE, &rl);
  chorusComm_t comms[2] = {nullptr, nullptr};
  if (chorusCommInitAll(comms, 2, nullptr) != chorusSuccess) {
    std::printf("FAIL: init: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  const std::set<int> ports = listeningPorts();  // the ranks' listeners (the root is gone)
  check(ports.size() >= 2, "found " + std::to_string(ports.size()) + " listeners");
  const std::vector<std::string> addrs = localAddresses();
  int ready[2];
  int hold[2];
  if (pipe(ready) != 0 || pipe(hold) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    // The flood: idle connections to every listener, held until the parent closes `hold`.
    close(ready[0]);
    close(hold[1]);
    rlimit mine{};
    getrlimit(RLIMIT_NOFILE, &mine);
    mine.rlim_cur = std::min<rlim_t>(mine.rlim_max, 1100 * (ports.size() + 1));
    setrlimit(RLIMIT_NOFILE, &mine);
    std::vector<int> held;
    for (int port : ports) {
      for (int i = 0; i < 1100; ++i) {
        for (const auto& a : addrs) {
          const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          if (fd < 0) break;
          sockaddr_in sa{};
          sa.sin_family = AF_INET;
          sa.sin_port = htons(static_cast<uint16_t>(port));
          inet_pton(AF_INET, a.c_str(), &sa.sin_addr);
          if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
            held.push_back(fd);
            break;
          }
          close(fd);
        }
      }
    }
    const int made = static_cast<int>(held.size());
    (void)!write(ready[1], &made, sizeof(made));
    char c;
    (void)!read(hold[0], &c, 1);
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  int made = 0;
  (void)!read(ready[0], &made, sizeof(made));
  std::printf("the flood holds %d idle connections to %zu listeners\n", made, ports.size());
  check(made >= 1100, "the flood made too few connections");
  // No spinning: over a second with the flood held, this process is mostly idle.
  const double cpu0 = cpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double cpu = cpuSeconds() - cpu0;
  std::printf("CPU time over 1 s of flood: %.3f s\n", cpu);
  check(cpu < 0.5, "the listeners spin under the flood");
  // The communicator still works: a split (through the listeners) and an all-reduce on the child.
  chorusComm_t children[2] = {nullptr, nullptr};
  std::string errors[2];
  std::vector<std::thread> t;
  for (int r = 0; r < 2; ++r) {
    t.emplace_back([&, r] {
      if (chorusCommSplit(comms[r], 0, r, &children[r], nullptr) != chorusSuccess) {
        errors[r] = std::string("split: ") + chorusGetLastError(nullptr);
        return;
      }
      std::vector<float> v(100000, static_cast<float>(r + 1));
      if (chorusAllReduce(v.data(), v.data(), v.size(), chorusFloat32, chorusSum, children[r], nullptr) !=
          chorusSuccess) {
        errors[r] = std::string("all-reduce: ") + chorusGetLastError(nullptr);
        return;
      }
      for (float x : v) {
        if (x != 3.0f) {
          errors[r] = "all-reduce result";
          return;
        }
      }
    });
  }
  for (auto& x : t) x.join();
  for (int r = 0; r < 2; ++r) check(errors[r].empty(), "rank " + std::to_string(r) + ": " + errors[r]);
  close(hold[1]);
  waitpid(child, nullptr, 0);
  for (int r = 0; r < 2; ++r) {
    if (children[r]) check(chorusCommDestroy(children[r]) == chorusSuccess, "destroy the split");
    check(chorusCommDestroy(comms[r]) == chorusSuccess, "destroy");
  }
  std::printf("%s\n", failures ? "FAILED" : "the listeners held out against the flood");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "flood") {
    setenv("CHORUS_P2P_DISABLE", "1", 1);
    setenv("CHORUS_SHM_DISABLE", "1", 1);
    setenv("CHORUS_TIMEOUT", "30", 1);
    return flood();
  }
  const int n = argc > 1 ? std::atoi(argv[1]) : 3;
  setenv("CHORUS_P2P_DISABLE", "1", 1);
  setenv("CHORUS_SHM_DISABLE", "1", 1);
  setenv("CHORUS_TIMEOUT", "60", 1);
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::printf("FAIL: %s\n", what.c_str());
      ++failures;
    }
  };
  // The listeners' warnings go to stderr: kept in a file to be counted, then passed on.
  char logPath[] = "/tmp/chorus-strangers-XXXXXX";
  const int logFd = mkstemp(logPath);
  const int savedErr = dup(2);
  dup2(logFd, 2);
  Stranger s;
  s.start(localAddresses());
  chorusUniqueId id;
  check(chorusGetUniqueId(&id) == chorusSuccess, "chorusGetUniqueId");
  // Let the strangers reach the root before any rank does.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<chorusComm_t> comms(n, nullptr);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      auto fail = [&](const char* what) { errors[r] = std::string(what) + ": " + chorusGetLastError(comms[r]); };
      if (chorusCommInitRank(&comms[r], n, id, r) != chorusSuccess) return fail("init");
      const double initS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("rank %d: init in %.3f s\n", r, initS);
      // Keep the strangers busy on the ranks' own listeners for a while, with traffic flowing.
      for (int round = 0; round < 20; ++round) {
        const size_t count = 100000 + static_cast<size_t>(round) * 1000;
        std::vector<float> v(count, static_cast<float>(r + 1));
        if (chorusAllReduce(v.data(), v.data(), count, chorusFloat32, chorusSum, comms[r], nullptr) != chorusSuccess) {
          return fail("all-reduce");
        }
        for (float x : v) {
          if (x != static_cast<float>(n * (n + 1) / 2)) return fail("all-reduce result");
        }
        std::vector<int32_t> b(5000, r == round % n ? round : -1);
        if (chorusBroadcast(b.data(), b.data(), b.size(), chorusInt32, round % n, comms[r], nullptr) != chorusSuccess) {
          return fail("broadcast");
        }
        for (int32_t x : b) {
          if (x != round) return fail("broadcast result");
        }
        std::vector<int64_t> mine(777, r * 1000 + round), all(777 * static_cast<size_t>(n));
        if (chorusAllGather(mine.data(), all.data(), 777, chorusInt64, comms[r], nullptr) != chorusSuccess) {
          return fail("all-gather");
        }
        for (size_t i = 0; i < all.size(); ++i) {
          if (all[i] != static_cast<int64_t>(i / 777) * 1000 + round) return fail("all-gather result");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  for (auto& t : ranks) t.join();
  s.finish();
  for (int r = 0; r < n; ++r) {
    check(errors[r].empty(), "rank " + std::to_string(r) + ": " + errors[r]);
    if (comms[r]) check(chorusCommDestroy(comms[r]) == chorusSuccess, "destroy");
  }
  std::fflush(stderr);
  dup2(savedErr, 2);
  std::ifstream logFile(logPath);
  std::string line;
  int rootDrops = 0, rankDrops = 0, warnings = 0;
  while (std::getline(logFile, line)) {
    std::fprintf(stderr, "%s\n", line.c_str());
    rootDrops += line.find("bootstrap root dropped") != std::string::npos;
    rankDrops += line.find("bootstrap dropped") != std::string::npos;
    warnings += line.find("CHORUS WARN") != std::string::npos;
  }
  ::close(logFd);
  ::unlink(logPath);
  std::printf("logged drops: %d by the root, %d by the ranks' listeners\n", rootDrops, rankDrops);
  check(rootDrops > 0 && rankDrops > 0, "the listeners did not log the strangers they dropped");
  // Strangers cannot flood the log: 5 warnings per listener per 10 s, then a count.
  std::printf("%d WARN lines\n", warnings);
  check(warnings <= 12 * (n + 1), "the listeners' warnings are not rate-limited");
  const int visits = s.visits.load();
  std::printf("strangers made %d connections to the root and the ranks' listeners\n", visits);
  check(visits > 6 * (n + 1), "the strangers reached too few listeners");
  std::printf("%s\n", failures ? "FAILED" : "every rank built its communicator and computed right among strangers");
  return failures ? 1 : 0;
}
