// chorusrun: starts N local processes of one Chorus job.
//
//   chorusrun -n N [--tag-output] [--grace S] [-x VAR[=VALUE]]... [--] cmd args...
//
// As mpirun: -np N works, the command may follow without "--" (everything from the first
// argument that is not chorusrun's own is the command's), and -x sets (VAR=VALUE) or passes on
// (VAR) a variable for the processes.
//
// Each process gets CHORUS_COMM_ID (rank 0 hosts the bootstrap root there), a random
// CHORUS_COMM_SECRET, CHORUS_RANK, CHORUS_NRANKS, CHORUS_LOCAL_RANK and CHORUS_LOCAL_SIZE, so
// chorusCommInitFromEnv works unchanged. Output is forwarded, prefixed "[1,<rank>]<stdout>:" with
// --tag-output as mpirun prints it. When one process fails (non-zero exit or a signal), the others
// are sent SIGTERM, then SIGKILL after a grace period, and chorusrun exits with the failure's code.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "src/core/os.h"

namespace {

volatile sig_atomic_t gSignal = 0;
void onSignal(int s) { gSignal = s; }

int freePort() {
  chorus::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  socklen_t len = sizeof(a);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

struct Child {
  pid_t pid = -1;
  int rank = 0;
  chorus::UniqueFd out;
  chorus::UniqueFd err;
  std::string outBuf;
  std::string errBuf;
  bool running = true;
};

void flushLines(std::string& buf, int rank, const char* tag, FILE* to, bool all) {
  size_t start = 0;
  while (true) {
    size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    std::fprintf(to, "[1,%d]<%s>:%.*s\n", rank, tag, static_cast<int>(nl - start), buf.data() + start);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (all && !buf.empty()) {
    std::fprintf(to, "[1,%d]<%s>:%s\n", rank, tag, buf.c_str());
    buf.clear();
  }
  std::fflush(to);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"chorusrun: start N local processes of a Chorus job"};
  int n = 0;
  bool tag = false;
  double grace = 5.0;
  std::vector<std::string> exports;
  app.add_option("-n,--np", n, "number of processes (mpirun's -np works too)")->required()->check(CLI::Range(1, 4096));
  app.add_flag("--tag-output", tag, "prefix each output line with [1,<rank>]<stdout|stderr>:");
  app.add_option("--grace", grace, "seconds between SIGTERM and SIGKILL when a process fails")->capture_default_str();
  app.add_option("-x", exports, "VAR=VALUE sets a variable for the processes; VAR passes this one on (as mpirun)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  // Everything from the first argument that is not chorusrun's own (or after "--") is the command.
  app.prefix_command();
  app.footer("The command follows the options, with or without \"--\".");
  // mpirun's single-dash long option; CLI11 would read "-np" as -n with the value "p".
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "-np") args[i] = "--np";
  }
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  CLI11_PARSE(app, static_cast<int>(argp.size()), argp.data());
  std::vector<std::string> cmd = app.remaining();
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) {
    std::fprintf(stderr, "chorusrun: no command to run (chorusrun -n N [options] [--] program args...)\n");
    return 2;
  }
  for (const std::string& e : exports) {
    const size_t eq = e.find('=');
    if (eq == 0 || e.empty()) {
      std::fprintf(stderr, "chorusrun: -x %s: give VAR=VALUE or VAR\n", e.c_str());
      return 2;
    }
    // VAR alone: the processes inherit this environment anyway.
    if (eq != std::string::npos) ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
  }

  const int port = freePort();
  if (port < 0) {
    std::fprintf(stderr, "chorusrun: cannot find a free TCP port on 127.0.0.1\n");
    return 1;
  }
  char secret[40];
  std::snprintf(secret, sizeof(secret), "%016llx%016llx", static_cast<unsigned long long>(chorus::randomU64()),
                static_cast<unsigned long long>(chorus::randomU64()));
  const std::string commId = "127.0.0.1:" + std::to_string(port);

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const pid_t self = ::getpid();

  std::vector<Child> children(n);
  for (int r = 0; r < n; ++r) {
    int outPipe[2] = {-1, -1};
    int errPipe[2] = {-1, -1};
    if (tag && (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0)) {
      std::perror("chorusrun: pipe");
      return 1;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("chorusrun: fork");
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != self) ::_exit(127);
      if (tag) {
        ::dup2(outPipe[1], 1);
        ::dup2(errPipe[1], 2);
      }
      ::setenv("CHORUS_COMM_ID", commId.c_str(), 1);
      ::setenv("CHORUS_COMM_SECRET", secret, 1);
      ::setenv("CHORUS_RANK", std::to_string(r).c_str(), 1);
      ::setenv("CHORUS_NRANKS", std::to_string(n).c_str(), 1);
      ::setenv("CHORUS_LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("CHORUS_LOCAL_SIZE", std::to_string(n).c_str(), 1);
      std::vector<char*> args;
      for (auto& a : cmd) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "chorusrun: cannot run %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    children[r].pid = pid;
    children[r].rank = r;
    if (tag) {
      ::close(outPipe[1]);
      ::close(errPipe[1]);
      children[r].out = chorus::UniqueFd(outPipe[0]);
      children[r].err = chorus::UniqueFd(errPipe[0]);
    }
  }

  int exitCode = 0;
  int running = n;
  int64_t killAt = 0;
  bool terminated = false;
  auto terminateAll = [&](int sig) {
    for (auto& c : children) {
      if (c.running) ::kill(c.pid, sig);
    }
  };
  while (running > 0 || (tag && std::any_of(children.begin(), children.end(),
                                            [](const Child& c) { return c.out.valid() || c.err.valid(); }))) {
    if (tag) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Child*, bool>> who;
      for (auto& c : children) {
        if (c.out.valid()) {
          fds.push_back({c.out.get(), POLLIN, 0});
          who.push_back({&c, true});
        }
        if (c.err.valid()) {
          fds.push_back({c.err.get(), POLLIN, 0});
          who.push_back({&c, false});
        }
      }
      ::poll(fds.data(), fds.size(), 100);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Child& c = *who[i].first;
        const bool isOut = who[i].second;
        char buf[65536];
        ssize_t r = ::read(fds[i].fd, buf, sizeof(buf));
        std::string& b = isOut ? c.outBuf : c.errBuf;
        if (r > 0) {
          b.append(buf, static_cast<size_t>(r));
          flushLines(b, c.rank, isOut ? "stdout" : "stderr", isOut ? stdout : stderr, false);
        } else {
          flushLines(b, c.rank, isOut ? "stdout" : "stderr", isOut ? stdout : stderr, true);
          (isOut ? c.out : c.err).reset();
        }
      }
    } else {
      ::usleep(20000);
    }
    if (gSignal && !terminated) {
      terminated = true;
      terminateAll(SIGTERM);
      killAt = chorus::nowNs() + static_cast<int64_t>(grace * 1e9);
      if (exitCode == 0) exitCode = 128 + gSignal;
    }
    while (true) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (auto& c : children) {
        if (c.pid != pid) continue;
        c.running = false;
        --running;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && !terminated) {
          std::fprintf(stderr, "chorusrun: rank %d (pid %d) %s %d; stopping the other ranks\n", c.rank, pid,
                       WIFEXITED(status) ? "exited with code" : "was killed by signal",
                       WIFEXITED(status) ? code : WTERMSIG(status));
          exitCode = code;
          terminated = true;
          terminateAll(SIGTERM);
          killAt = chorus::nowNs() + static_cast<int64_t>(grace * 1e9);
        }
      }
    }
    if (terminated && killAt && chorus::nowNs() > killAt) {
      terminateAll(SIGKILL);
      killAt = 0;
    }
  }
  return exitCode;
}
