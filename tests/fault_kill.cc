// One rank is killed (SIGKILL) at a seeded random moment inside each collective; every survivor
// must get an error that names the killed rank and its host, promptly (long before the timeout),
// abort must return promptly, and the survivor's process must be left as it was before init:
// descriptors, threads, memory mappings, and nothing of Chorus in /dev/shm. Before the abort, the
// survivors carry on: chorusCommShrink without the dead rank (no root, no help from it), then an
// all-reduce and a broadcast on the new communicator, checked element by element.
//
//   fault_kill TRANSPORT NRANKS [SEED]    TRANSPORT: shm | socket
//   fault_kill netns LAYOUT [SEED]        ranks on namespace hosts (CHORUS_NET_PLUGIN reaches them)
//
// FAULT_KILL_FDS=1 (FAULT_KILL_MAPS=1) lists a rank's descriptors (mappings) before and after when
// they differ.
//
// This program forks the ranks itself (a launcher would take the job down with the first death)
// and is none of them. Each rank writes one line to a shared pipe; this program checks them and
// prints, per collective, what every rank saw and how long it took (docs/RELIABILITY.md).
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "proc_count.h"

namespace {

constexpr size_t kCount = size_t(1) << 20;  // floats per rank and call: 4 MiB
constexpr double kPromptS = 5;              // every survivor's error within this of the death
constexpr double kAbortS = 3;               // and its abort within this
// `fault_kill stop ...`: the victim stops (SIGSTOP, a straggler) instead of dying; the others
// must time out (CHORUS_TIMEOUT=3) with a message that names it, directly or through a notice.
bool gStop = false;
constexpr int kStopTimeoutS = 3;
const char* kColls[] = {"allreduce", "broadcast", "reduce",  "allgather", "reducescatter",
                        "alltoall",  "gather",    "scatter", "sendrecv"};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

using chorus::test::countDir;

// What a process holds that a communicator could leak.
struct Holdings {
  int fds = 0, sockets = 0, threads = 0, maps = 0, chorusMaps = 0, shm = 0;
  std::string text() const {
    return "fds " + std::to_string(fds) + " (sockets " + std::to_string(sockets) + "), threads " +
           std::to_string(threads) + ", mappings " + std::to_string(maps) + " (of shared memory " +
           std::to_string(chorusMaps) + "), /dev/shm chorus entries " + std::to_string(shm);
  }
  bool operator==(const Holdings& o) const {
    return fds == o.fds && threads == o.threads && maps == o.maps && chorusMaps == o.chorusMaps && shm == o.shm;
  }
  // Nothing more than `before`. Over a network plugin (CHORUS_NET_PLUGIN) the provider, not Chorus,
  // owns its connections' sockets: it closes the world communicator's connection to the dead rank
  // (libfabric's rxm does, and retries it), so there sockets may be fewer than before; every other
  // descriptor must be there as before.
  bool heldAsBefore(const Holdings& before) const {
    const char* plugin = std::getenv("CHORUS_NET_PLUGIN");
    if (!plugin || !*plugin) return *this == before;
    return fds - sockets == before.fds - before.sockets && sockets <= before.sockets && threads == before.threads &&
           maps == before.maps && chorusMaps == before.chorusMaps && shm == before.shm;
  }
};

// What each descriptor is ("3 socket:[1234]"), and the list at the last settled() count
// (FAULT_KILL_FDS only).
std::vector<std::string> fdList() {
  std::vector<std::string> out;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char link[128] = {0};
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      if (readlink(path.c_str(), link, sizeof(link) - 1) > 0) out.push_back(std::string(e->d_name) + " " + link);
    }
    closedir(d);
  }
  return out;
}
// glibc's thread arenas: each heap is a 64 MiB reservation aligned to its size, which grows in place
// by making pages of it writable, and so splits into more lines of /proc/self/maps. A heap that
// grew holds no more than before in the sense counted here (memory, not mappings, is what a busy
// thread's failure path may take), so all of one heap counts as one mapping.
constexpr uintptr_t kArenaHeapBytes = uintptr_t(64) << 20;

Holdings holdings() {
  Holdings h;
  // Descriptors and sockets from one listing: a network provider's thread may close a socket at any
  // moment, and two listings could see it once in one and not in the other.
  const std::vector<std::string> fds = fdList();
  h.fds = static_cast<int>(fds.size());
  for (const std::string& f : fds) h.sockets += f.find(" socket:") != std::string::npos ? 1 : 0;
  h.threads = countDir("/proc/self/task");
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t heap = 0;  // the arena heap the last line belonged to (0: none)
  while (std::getline(maps, line)) {
    unsigned long long start = 0;
    char perms[5] = {0};
    char path[2] = {0};
    const int fields = std::sscanf(line.c_str(), "%llx-%*llx %4s %*s %*s %*s %1s", &start, perms, path);
    const bool privateAnon = fields == 2 && perms[3] == 'p';
    const uintptr_t base = static_cast<uintptr_t>(start) & ~(kArenaHeapBytes - 1);
    if (privateAnon && (start == base || (heap != 0 && base == heap))) {
      if (start == base) {
        heap = base;
        ++h.maps;
      }
      continue;  // a further piece of the heap counted above
    }
    heap = 0;
    ++h.maps;
    if (line.find("memfd:") != std::string::npos || line.find("/dev/shm") != std::string::npos) ++h.chorusMaps;
  }
  h.shm = countDir("/dev/shm", "chorus");
  return h;
}

std::vector<std::string>& fdsBefore() {
  static std::vector<std::string> f;
  return f;
}

// /proc/self/maps as it was at the last settled() count (FAULT_KILL_MAPS only).
std::string& mapsBefore() {
  static std::string m;
  return m;
}

// Holdings once they stay the same for 100 ms (a thread told to end may take a moment to leave
// /proc, a peer's connection a moment to be accepted or closed), and, for a forked rank, no
// thread but this one is left; or after 3 s, whatever is there then. `threadsLeft` is how many
// threads the process keeps for good (1 forked; a launched rank keeps its world communicator's).
Holdings settled(int threadsLeft = 1) {
  Holdings last = holdings();
  int same = 0;
  for (int i = 0; i < 300 && (same < 10 || last.threads > threadsLeft); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const Holdings now = holdings();
    same = now == last ? same + 1 : 0;
    last = now;
  }
  return last;
}

// The count before the fault (and, with FAULT_KILL_MAPS, the mappings then).
Holdings countBefore(int threadsLeft) {
  const Holdings h = settled(threadsLeft);
  if (std::getenv("FAULT_KILL_FDS")) fdsBefore() = fdList();
  if (std::getenv("FAULT_KILL_MAPS")) {
    std::ifstream f("/proc/self/maps");
    std::stringstream ss;
    ss << f.rdbuf();
    mapsBefore() = ss.str();
  }
  return h;
}

chorusResult_t runOnce(const std::string& coll, chorusComm_t comm, int rank, int n, float* send, float* recv) {
  const size_t per = kCount / static_cast<size_t>(n);
  if (coll == "allreduce") return chorusAllReduce(send, recv, kCount, chorusFloat32, chorusSum, comm, nullptr);
  if (coll == "broadcast") return chorusBroadcast(send, recv, kCount, chorusFloat32, 0, comm, nullptr);
  if (coll == "reduce") return chorusReduce(send, recv, kCount, chorusFloat32, chorusSum, n - 1, comm, nullptr);
  if (coll == "allgather") return chorusAllGather(send, recv, per, chorusFloat32, comm, nullptr);
  if (coll == "reducescatter") return chorusReduceScatter(send, recv, per, chorusFloat32, chorusSum, comm, nullptr);
  if (coll == "alltoall") return chorusAlltoAll(send, recv, per, chorusFloat32, comm, nullptr);
  if (coll == "gather") return chorusGather(send, recv, per, chorusFloat32, 0, comm, nullptr);
  if (coll == "scatter") return chorusScatter(send, recv, per, chorusFloat32, 0, comm, nullptr);
  // sendrecv: a ring of point-to-point pairs in one group.
  chorusGroupStart();
  chorusSend(send, kCount, chorusFloat32, (rank + 1) % n, comm, nullptr);
  chorusRecv(recv, kCount, chorusFloat32, (rank - 1 + n) % n, comm, nullptr);
  return chorusGroupEnd();
}

// The survivors' next step: a communicator without the victim, and two collectives on it, checked.
// Returns "shrunk" or "shrink-failed:<why>" (one word).
std::string carryOn(chorusComm_t parent, int rank, int n, int victim) {
  int exclude[1] = {victim};
  chorusComm_t small = nullptr;
  auto failed = [&](const std::string& why) {
    std::string w = why;
    for (char& ch : w) ch = ch == ' ' ? '_' : ch;
    if (small) chorusCommDestroy(small);
    return "shrink-failed:" + w;
  };
  if (chorusCommShrink(parent, exclude, 1, &small, nullptr, CHORUS_SHRINK_DEFAULT) != chorusSuccess) {
    return failed(chorusGetLastError(nullptr));
  }
  int me = -1, size = 0;
  chorusCommUserRank(small, &me);
  chorusCommCount(small, &size);
  if (size != n - 1 || me != (rank < victim ? rank : rank - 1)) {
    return failed("rank " + std::to_string(me) + " of " + std::to_string(size));
  }
  std::vector<float> v(4096, static_cast<float>(me + 1));
  if (chorusAllReduce(v.data(), v.data(), v.size(), chorusFloat32, chorusSum, small, nullptr) != chorusSuccess) {
    return failed(chorusGetLastError(small));
  }
  const float sum = static_cast<float>(size * (size + 1) / 2);
  for (float x : v) {
    if (x != sum) return failed("all-reduce gave " + std::to_string(x) + ", not " + std::to_string(sum));
  }
  std::vector<int32_t> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = me == size - 1 ? static_cast<int32_t>(i * 7) : -1;
  if (chorusBroadcast(b.data(), b.data(), b.size(), chorusInt32, size - 1, small, nullptr) != chorusSuccess) {
    return failed(chorusGetLastError(small));
  }
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] != static_cast<int32_t>(i * 7)) return failed("broadcast element " + std::to_string(i) + " wrong");
  }
  if (chorusCommDestroy(small) != chorusSuccess) return "shrink-failed:destroy";
  return "shrunk";
}

// The fault itself, on `comm` (this rank's communicator of n ranks, made after `before` was
// counted): the victim kills itself `delayMs` into its calls; the survivors report their error,
// shrink and carry on, abort, and compare what they hold with `before`. Writes one line with
// `say` and ends the process.
// `send` and `recv` were allocated before `before` was counted.
[[noreturn]] void faultPhase(chorusComm_t comm, const std::string& coll, int rank, int n, int victim, int delayMs,
                             std::vector<float>& send, std::vector<float>& recv, const Holdings& before,
                             int threadsLeft, const std::function<void(const std::string&)>& say) {
  if (rank == victim) {
    std::thread([&, delayMs] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
      char line[96];
      std::snprintf(line, sizeof(line), "rank %d killed %.6f", rank, now());
      say(line);
      raise(gStop ? SIGSTOP : SIGKILL);  // stopped: the test ends it with SIGKILL once the others reported
    }).detach();
  }
  const double start = now();
  chorusResult_t r = chorusSuccess;
  int calls = 0;
  while (r == chorusSuccess && now() - start < 30) {
    r = runOnce(coll, comm, rank, n, send.data(), recv.data());
    ++calls;
  }
  const double failedAt = now();
  const std::string message = r == chorusSuccess ? "" : chorusGetLastError(comm);
  const double s0 = now();
  const std::string shrunk = carryOn(comm, rank, n, victim);
  const double shrinkS = now() - s0;
  const double a0 = now();
  const chorusResult_t ar = chorusCommAbort(comm);
  const double abortS = now() - a0;
  const Holdings after = settled(threadsLeft);
  if (std::getenv("FAULT_KILL_FDS") && !after.heldAsBefore(before)) {
    for (const std::string& f : fdsBefore()) std::fprintf(stderr, "rank %d fd before %s\n", rank, f.c_str());
    for (const std::string& f : fdList()) std::fprintf(stderr, "rank %d fd after %s\n", rank, f.c_str());
  }
  if (std::getenv("FAULT_KILL_MAPS") && !after.heldAsBefore(before)) {
    std::ifstream f("/proc/self/maps");
    std::string l;
    while (std::getline(f, l)) std::fprintf(stderr, "rank %d map %s\n", rank, l.c_str());
    std::fprintf(stderr, "rank %d maps before:\n%s", rank, mapsBefore().c_str());
  }
  std::ostringstream o;
  o.precision(6);
  o << std::fixed << "rank " << rank << " failed " << failedAt << " code " << static_cast<int>(r) << " calls " << calls
    << " abort " << abortS << " abortcode " << static_cast<int>(ar) << " shrink " << shrinkS << " " << shrunk
    << " leak " << (after.heldAsBefore(before) ? "none" : "YES") << " [" << before.text() << " -> " << after.text()
    << "] msg " << message;
  say(o.str());
  std::fflush(stdout);
  _exit(0);
}

// A forked rank; writes "rank R ..." lines to `out`.
[[noreturn]] void rankMain(const std::string& coll, chorusUniqueId warm, chorusUniqueId id, int rank, int n, int victim,
                           int delayMs, int out) {
  auto say = [&](const std::string& s) {
    const std::string line = s + "\n";
    (void)!write(out, line.data(), line.size());  // one write per line: pipe writes this small are atomic
  };
  std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
  // A first communicator, used, shrunk (by no rank) and destroyed, so what a process keeps once
  // and reuses (libraries hwloc loads, the C library's thread stacks and malloc arenas, as many
  // as threads ever ran at once) is there before the count.
  chorusComm_t comm;
  chorusComm_t same = nullptr;
  if (chorusCommInitRank(&comm, n, warm, rank) != chorusSuccess ||
      runOnce(coll, comm, rank, n, send.data(), recv.data()) != chorusSuccess ||
      chorusCommShrink(comm, nullptr, 0, &same, nullptr, CHORUS_SHRINK_DEFAULT) != chorusSuccess ||
      runOnce(coll, same, rank, n, send.data(), recv.data()) != chorusSuccess ||
      chorusCommDestroy(same) != chorusSuccess || chorusCommDestroy(comm) != chorusSuccess) {
    say("rank " + std::to_string(rank) + " warm-up-failed " + chorusGetLastError(nullptr));
    _exit(1);
  }
  const Holdings before = countBefore(1);
  if (chorusCommInitRank(&comm, n, id, rank) != chorusSuccess) {
    say("rank " + std::to_string(rank) + " init-failed " + chorusGetLastError(nullptr));
    _exit(1);
  }
  faultPhase(comm, coll, rank, n, victim, delayMs, send, recv, before, 1, say);
}

// A rank started by a launcher (netns_run.sh: CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID), one
// per process, writing its lines to stdout. The world communicator comes from the environment and
// stays up to the end; the warm-up and the faulty communicator are shrinks of it (by no rank), so
// the count before and after sees the world alike and no second root is needed.
[[noreturn]] void launchedRank(const std::string& coll, int victim, int delayMs) {
  auto say = [](const std::string& s) {
    const std::string line = s + "\n";
    (void)!write(1, line.data(), line.size());  // unbuffered: the victim's line must be out before it dies
  };
  chorusComm_t world = nullptr;
  if (chorusCommInitFromEnv(&world, nullptr) != chorusSuccess) {
    say(std::string("rank ? init-failed ") + chorusGetLastError(nullptr));
    std::exit(1);
  }
  int rank = 0, n = 1;
  chorusCommUserRank(world, &rank);
  chorusCommCount(world, &n);
  std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
  if (runOnce(coll, world, rank, n, send.data(), recv.data()) != chorusSuccess) {
    say("rank " + std::to_string(rank) + " warm-up-failed " + chorusGetLastError(world));
    std::exit(1);
  }
  const int worldThreads = settled(1000).threads;  // what the world communicator runs for good
  // The warm-up has one communicator more alive at once than the fault phase will (world, warm,
  // same, third against world, the faulty one and its shrink), so the C library's cache of thread
  // stacks is as large before the count as it will ever need to be.
  chorusComm_t warm = nullptr;
  chorusComm_t same = nullptr;
  chorusComm_t third = nullptr;
  if (chorusCommShrink(world, nullptr, 0, &warm, nullptr, CHORUS_SHRINK_DEFAULT) != chorusSuccess ||
      runOnce(coll, warm, rank, n, send.data(), recv.data()) != chorusSuccess ||
      chorusCommShrink(warm, nullptr, 0, &same, nullptr, CHORUS_SHRINK_DEFAULT) != chorusSuccess ||
      runOnce(coll, same, rank, n, send.data(), recv.data()) != chorusSuccess ||
      chorusCommShrink(same, nullptr, 0, &third, nullptr, CHORUS_SHRINK_DEFAULT) != chorusSuccess ||
      runOnce(coll, third, rank, n, send.data(), recv.data()) != chorusSuccess ||
      chorusCommDestroy(third) != chorusSuccess || chorusCommDestroy(same) != chorusSuccess ||
      chorusCommDestroy(warm) != chorusSuccess) {
    say("rank " + std::to_string(rank) + " warm-up-failed " + chorusGetLastError(nullptr));
    std::exit(1);
  }
  const Holdings before = countBefore(worldThreads);
  chorusComm_t comm = nullptr;
  if (chorusCommShrink(world, nullptr, 0, &comm, nullptr, CHORUS_SHRINK_DEFAULT) != chorusSuccess) {
    say("rank " + std::to_string(rank) + " init-failed " + chorusGetLastError(nullptr));
    std::exit(1);
  }
  faultPhase(comm, coll, rank, n, victim, delayMs, send, recv, before, worldThreads, say);
}

}  // namespace

// Runs one collective's fault across namespace hosts: netns_run.sh starts one `fault_kill rank`
// per rank; their stdout lines come back prefixed "[host h rank r] ". Returns the rank lines, or
// sets *skipped when namespaces cannot be made here.
std::string runOnHosts(const std::string& layout, const std::string& coll, int victim, int delayMs, bool* skipped) {
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return "";
  const std::string cmd = std::string("bash ") + CHORUS_NETNS_RUN + " --timeout 120 " + layout + " -- " + self +
                          " rank " + coll + " " + std::to_string(victim) + " " + std::to_string(delayMs) +
                          " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string all;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), p)) > 0) all.append(buf, got);
  const int status = pclose(p);
  *skipped = WIFEXITED(status) && WEXITSTATUS(status) == 77;
  std::string lines;
  std::istringstream in(all);
  std::string line;
  while (std::getline(in, line)) {
    const size_t k = line.find("] ");
    if (line.rfind("[host ", 0) == 0 && k != std::string::npos) lines += line.substr(k + 2) + "\n";
  }
  return lines;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "rank" && argc == 5) {
    launchedRank(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  }
  if (mode == "stop") {
    gStop = true;
    --argc;
    ++argv;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: fault_kill shm|socket NRANKS [SEED] | fault_kill netns LAYOUT [SEED]\n");
    return 2;
  }
  const std::string transport = argv[1];
  const std::string layout = transport == "netns" ? argv[2] : "";
  int n = 0;
  if (transport == "netns") {
    std::istringstream in(layout);
    std::string part;
    while (std::getline(in, part, ',')) n += std::atoi(part.c_str());
  } else {
    n = std::atoi(argv[2]);
  }
  const unsigned seed = argc > 3 ? static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10))
                                 : static_cast<unsigned>(std::random_device{}());
  if ((transport != "shm" && transport != "socket" && transport != "netns") || n < 2 ||
      (gStop && transport == "netns")) {
    std::fprintf(stderr,
                 "fault_kill: TRANSPORT is shm, socket or netns (with a layout such as 2,2), at least 2 ranks\n");
    return 2;
  }
  if (transport == "socket") setenv("CHORUS_SHM_DISABLE", "1", 1);
  unsetenv("CHORUS_COMM_ID");
  // A death must be noticed long before the timeout; a stopped rank only by it.
  setenv("CHORUS_TIMEOUT", gStop ? std::to_string(kStopTimeoutS).c_str() : "30", 1);
  const double promptS = gStop ? kStopTimeoutS + kPromptS : kPromptS;
  std::printf("fault_kill %s%s, %d ranks, seed %u (rerun: fault_kill %s%s %s %u)\n", gStop ? "stop " : "",
              transport.c_str(), n, seed, gStop ? "stop " : "", transport.c_str(), argv[2], seed);
  std::mt19937 rng(seed);
  int failures = 0;
  for (const char* coll : kColls) {
    const int victim = static_cast<int>(rng() % static_cast<unsigned>(n));
    const int delayMs = 20 + static_cast<int>(rng() % 300);
    std::string all;
    if (transport == "netns") {
      bool skipped = false;
      all = runOnHosts(layout, coll, victim, delayMs, &skipped);
      if (skipped) {
        std::printf("SKIP: network namespaces cannot be made here\n");
        return 77;
      }
    } else {
      // The roots run in this process, which is no rank and outlives them all.
      chorusUniqueId warm, id;
      if (chorusGetUniqueId(&warm) != chorusSuccess || chorusGetUniqueId(&id) != chorusSuccess) return 1;
      int fds[2];
      if (pipe(fds) != 0) return 1;
      std::fflush(stdout);  // a child that flushes must not print this process's buffer again
      std::vector<pid_t> pids;
      for (int r = 0; r < n; ++r) {
        const pid_t p = fork();
        if (p == 0) {
          close(fds[0]);
          rankMain(coll, warm, id, r, n, victim, delayMs, fds[1]);
        }
        pids.push_back(p);
      }
      close(fds[1]);
      // Until every survivor has reported (a stopped victim keeps its end of the pipe open), or
      // the pipe closes, or long past any deadline; then the victim is ended if it still lives.
      char buf[4096];
      const double until = now() + promptS + 60;
      auto reported = [&] {  // lines "rank R failed ..."; a message may say "failed" again
        int k = 0;
        std::istringstream lines(all);
        std::string l;
        int r = 0;
        char word[16] = {0};
        while (std::getline(lines, l)) {
          k += std::sscanf(l.c_str(), "rank %d %15s", &r, word) == 2 && std::strcmp(word, "failed") == 0;
        }
        return k;
      };
      while (reported() < n - 1 && now() < until) {
        pollfd pf{fds[0], POLLIN, 0};
        if (::poll(&pf, 1, 200) <= 0) continue;
        const ssize_t got = read(fds[0], buf, sizeof(buf));
        if (got <= 0) break;
        all.append(buf, static_cast<size_t>(got));
      }
      kill(pids[victim], SIGKILL);
      close(fds[0]);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
    }

    std::printf("\n%s: rank %d %s %d ms into its calls\n", coll, victim, gStop ? "stopped" : "killed", delayMs);
    double killedAt = 0;
    std::map<int, std::string> lines;
    std::istringstream in(all);
    std::string line;
    while (std::getline(in, line)) {
      int r = -1;
      double t = 0;
      if (std::sscanf(line.c_str(), "rank %d killed %lf", &r, &t) == 2)
        killedAt = t;
      else if (std::sscanf(line.c_str(), "rank %d", &r) == 1)
        lines[r] = line;
    }
    auto bad = [&](const std::string& why) {
      std::printf("  FAIL: %s\n", why.c_str());
      ++failures;
    };
    if (killedAt == 0) bad("the victim never reached its kill");
    const std::string who = "rank " + std::to_string(victim) + " (host ";
    for (int r = 0; r < n; ++r) {
      if (r == victim) continue;
      auto it = lines.find(r);
      if (it == lines.end()) {
        bad("rank " + std::to_string(r) + " reported nothing");
        continue;
      }
      if (it->second.find(" failed ") == std::string::npos) {
        bad(it->second);
        continue;
      }
      double failedAt = 0, abortS = 0, shrinkS = 0;
      int code = 0, calls = 0, abortCode = 0;
      char leak[8] = {0};
      char shrunk[512] = {0};
      std::sscanf(it->second.c_str(),
                  "rank %*d failed %lf code %d calls %d abort %lf abortcode %d shrink %lf %511s leak %7s", &failedAt,
                  &code, &calls, &abortS, &abortCode, &shrinkS, shrunk, leak);
      const size_t m = it->second.find(" msg ");
      const std::string msg = m == std::string::npos ? "" : it->second.substr(m + 5);
      const double after = failedAt - killedAt;
      std::printf("  rank %d: code %d after %.3f s (%d calls), %s in %.3f s, abort %.3f s, leaks %s: %s\n", r, code,
                  after, calls, shrunk, shrinkS, abortS, leak, msg.c_str());
      if (std::string(shrunk) != "shrunk") bad(std::string("the survivors could not carry on: ") + shrunk);
      if (code != chorusRemoteError && code != chorusSystemError) bad("a remote or system error was expected");
      if (msg.find(who) == std::string::npos) bad("the message does not name " + who + "...)");
      if (after > promptS) bad("the error took longer than " + std::to_string(promptS) + " s");
      if (abortS > kAbortS || abortCode != chorusSuccess) bad("abort was slow or failed");
      if (std::string(leak) != "none") bad("the process holds more than before init: " + it->second);
    }
  }
  std::printf("\n%s\n",
              failures ? "FAILED"
              : gStop  ? "every other rank timed out naming the stopped rank, shrank and carried on, aborted, "
                         "leaked nothing"
                       : "every survivor failed promptly, named the dead rank, shrank and carried on, aborted, leaked "
                         "nothing");
  return failures ? 1 : 0;
}
