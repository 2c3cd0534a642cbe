// chorusrun: starts the processes of one Chorus job, on this host or on several.
//
//   chorusrun [-n N] [-H host[:slots],...] [--hostfile FILE] [--rsh TEMPLATE] [--oversubscribe]
//             [--keep-going] [--tag-output] [--grace S] [-x VAR[=VALUE]]... [--] cmd args...
//
// As mpirun: -np N works, the command may follow without "--" (everything from the first
// argument that is not chorusrun's own is the command's), -x sets (VAR=VALUE) or passes on (VAR)
// a variable for the processes, and -H / --hostfile place ranks on hosts slot by slot (a host
// without a slot count has one; -n defaults to the slots; more ranks than slots needs
// --oversubscribe). Ranks on this host are started directly; ranks elsewhere through the
// remote-shell template (default "ssh -o BatchMode=yes {host} {cmd}"; CHORUS_RSH sets another),
// where {host} is the host's name and {cmd} a POSIX shell command line.
//
// Each process gets CHORUS_COMM_ID (rank 0 hosts the bootstrap root there), a random
// CHORUS_COMM_SECRET, CHORUS_RANK, CHORUS_NRANKS, CHORUS_LOCAL_RANK and CHORUS_LOCAL_SIZE, so
// chorusCommInitFromEnv works unchanged. Output is forwarded, prefixed "[1,<rank>]<stdout>:" with
// --tag-output as mpirun prints it. When one process fails (non-zero exit or a signal), the others
// are sent SIGTERM, then SIGKILL after a grace period, and chorusrun exits with the failure's code;
// with --keep-going they go on (a job that shrinks its communicator past a lost rank), and
// chorusrun exits with the first failure's code once every process has ended.
// A remote rank reads the secret from its standard input, which chorusrun keeps open: when that
// closes (chorusrun ends, or stops the job), the rank is sent SIGTERM, then SIGKILL.
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
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "src/common/os.h"

namespace {

volatile sig_atomic_t gSignal = 0;
void onSignal(int s) { gSignal = s; }

// A port free on this host: on loopback for a job of this host alone, else on every address.
struct Host {
  std::string name;
  int slots = 1;
  bool local = false;
};

bool parseCount(const std::string& t, int* out) {
  if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoi(t);
  return *out > 0;
}

// -H "a:2,b" -> a with 2 slots, b with 1.
bool parseHostList(const std::string& list, std::vector<Host>* hosts, std::string* err) {
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    Host h;
    const size_t colon = item.rfind(':');
    h.name = item.substr(0, colon);
    if (colon != std::string::npos && !parseCount(item.substr(colon + 1), &h.slots)) {
      *err = "-H " + list + ": '" + item + "' is not host or host:slots (slots a positive number)";
      return false;
    }
    if (h.name.empty()) {
      *err = "-H " + list + ": an empty host name";
      return false;
    }
    hosts->push_back(h);
  }
  return true;
}

// An Open MPI hostfile: "host [slots=N] [max_slots=M]" per line, '#' comments.
bool parseHostfile(const std::string& path, std::vector<Host>* hosts, std::string* err) {
  std::ifstream f(path);
  if (!f) {
    *err = "--hostfile " + path + ": cannot read it: " + std::strerror(errno);
    return false;
  }
  std::string line;
  for (int lineNo = 1; std::getline(f, line); ++lineNo) {
    line = line.substr(0, line.find('#'));
    std::stringstream ss(line);
    Host h;
    if (!(ss >> h.name)) continue;
    const std::string where = path + ":" + std::to_string(lineNo) + ": ";
    for (std::string kv; ss >> kv;) {
      const size_t eq = kv.find('=');
      const std::string key = kv.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : kv.substr(eq + 1);
      int v = 0;
      if ((key == "slots" || key == "max_slots" || key == "max-slots") && parseCount(value, &v)) {
        if (key == "slots") h.slots = v;
      } else {
        *err = where + "'" + kv + "' is not slots=N or max_slots=N";
        return false;
      }
    }
    hosts->push_back(h);
  }
  if (hosts->empty()) {
    *err = "--hostfile " + path + " names no host";
    return false;
  }
  return true;
}

bool isLocalHost(const std::string& name) {
  if (name == "localhost" || name == "127.0.0.1" || name == "::1") return true;
  const std::string me = chorus::hostName();
  return name == me || name == me.substr(0, me.find('.')) || me == name.substr(0, name.find('.'));
}

std::string shellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The template's words: split at blanks, with '...' and "..." grouping.
std::vector<std::string> splitWords(const std::string& t) {
  std::vector<std::string> words;
  std::string cur;
  bool in = false;
  char quote = 0;
  for (char c : t) {
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        cur += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in) words.push_back(cur);
      cur.clear();
      in = false;
    } else {
      cur += c;
      in = true;
    }
  }
  if (in) words.push_back(cur);
  return words;
}

// The command line a remote rank runs, for a POSIX shell. It takes the secret from its standard
// input (not from its arguments, which other users of the host can read), starts the program
// with the job's variables, and stops it when that input closes: chorusrun has ended, or is
// stopping the job. A rank killed by a signal kills the shell with the same signal, so chorusrun
// sees it as such where the remote shell passes signals on.
std::string remoteCommand(const std::vector<std::string>& env, const std::vector<std::string>& cmd, double grace) {
  char cwd[4096] = {0};
  std::string script =
      "exec 3<&0 </dev/null; IFS= read -r CHORUS_COMM_SECRET <&3 || exit 127; export CHORUS_COMM_SECRET; ";
  if (::getcwd(cwd, sizeof(cwd) - 1)) script += "cd " + shellQuote(cwd) + " 2>/dev/null; ";
  // The program leads a process group of its own (setsid, where the host has it), so stopping it
  // stops what it started too.
  script += "S=; command -v setsid >/dev/null 2>&1 && S=setsid; $S env";
  for (const std::string& e : env) script += " " + shellQuote(e);
  for (const std::string& a : cmd) script += " " + shellQuote(a);
  char g[32];
  std::snprintf(g, sizeof(g), "%.0f", std::max(1.0, grace));
  script += " 3<&- & p=$!; { while read -r _; do :; done; kill -s TERM -- -$p || kill -s TERM $p; sleep " +
            std::string(g) +
            "; kill -s KILL -- -$p || kill -s KILL $p; } <&3 >/dev/null 2>&1 & w=$!; exec 3<&-; "
            "wait $p; rc=$?; kill -s KILL -- -$p 2>/dev/null; kill $w 2>/dev/null; "
            "if [ $rc -gt 128 ] && [ $rc -lt 160 ]; then kill -$((rc - 128)) $$; fi; exit $rc";
  return "sh -c " + shellQuote(script);
}

struct Child {
  pid_t pid = -1;
  int rank = 0;
  bool remote = false;
  chorus::UniqueFd in;  // a remote rank's standard input: the secret, then held open
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
  CLI::App app{"chorusrun: start the processes of a Chorus job, on this host or on several"};
  int n = 0;
  bool tag = false;
  double grace = 5.0;
  std::vector<std::string> exports;
  std::vector<std::string> hostLists;
  std::string hostfile;
  std::string rsh = std::getenv("CHORUS_RSH") ? std::getenv("CHORUS_RSH") : "ssh -o BatchMode=yes {host} {cmd}";
  bool oversubscribe = false;
  bool keepGoing = false;
  app.add_option("-n,--np", n, "number of processes (mpirun's -np works too; default: the hosts' slots)")
      ->check(CLI::Range(1, 4096));
  app.add_option("-H,--host", hostLists, "hosts as host[:slots],... (mpirun's -H)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--hostfile,--machinefile", hostfile, "a file of hosts, one per line: host [slots=N]");
  app.add_option("--rsh", rsh, "how to start a rank on another host: {host} and {cmd} (a POSIX shell command line)")
      ->capture_default_str();
  app.add_flag("--oversubscribe", oversubscribe, "allow more ranks than the hosts' slots");
  app.add_flag("--keep-going", keepGoing,
               "a process that fails does not stop the others (a job whose survivors shrink their communicator "
               "and go on); chorusrun exits with the first failure's code once all have ended");
  app.add_flag("--tag-output", tag, "prefix each output line with [1,<rank>]<stdout|stderr>:");
  app.add_option("--grace", grace, "seconds between SIGTERM and SIGKILL when a process fails")->capture_default_str();
  app.add_option("-x", exports, "VAR=VALUE sets a variable for the processes; VAR passes this one on (as mpirun)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  // Everything from the first argument that is not chorusrun's own (or after "--") is the command.
  app.prefix_command();
  app.footer("The command follows the options, with or without \"--\".");
  // mpirun's single-dash long options; CLI11 would read "-np" as -n with the value "p".
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "-np") args[i] = "--np";
    if (args[i] == "-hostfile" || args[i] == "-machinefile") args[i] = "--hostfile";
  }
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  CLI11_PARSE(app, static_cast<int>(argp.size()), argp.data());
  std::vector<std::string> cmd = app.remaining();
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  auto usageError = [](const std::string& msg) {
    std::fprintf(stderr, "chorusrun: %s\n", msg.c_str());
    return 2;
  };
  if (cmd.empty()) return usageError("no command to run (chorusrun -n N [options] [--] program args...)");
  // The variables a rank gets beyond what it inherits: every -x, by value, for remote hosts.
  std::vector<std::string> passed;
  for (const std::string& e : exports) {
    const size_t eq = e.find('=');
    if (eq == 0 || e.empty()) return usageError("-x " + e + ": give VAR=VALUE or VAR");
    if (eq != std::string::npos) {
      ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
      passed.push_back(e);
    } else if (const char* v = std::getenv(e.c_str())) {
      passed.push_back(e + "=" + v);
    }
  }

  // Where each rank runs.
  std::vector<Host> hosts;
  std::string err;
  for (const std::string& l : hostLists) {
    if (!parseHostList(l, &hosts, &err)) return usageError(err);
  }
  if (!hostfile.empty() && !parseHostfile(hostfile, &hosts, &err)) return usageError(err);
  if (hosts.empty()) {
    if (n == 0) return usageError("give the number of processes, -n N (or hosts with -H or --hostfile)");
    hosts.push_back(Host{"localhost", n, true});
  }
  int slots = 0;
  for (Host& h : hosts) {
    h.local = isLocalHost(h.name);
    slots += h.slots;
  }
  if (n == 0) n = slots;
  if (n > 4096) return usageError(std::to_string(n) + " ranks: at most 4096 (give -n)");
  if (n > slots && !oversubscribe) {
    return usageError(std::to_string(n) + " ranks but the hosts have " + std::to_string(slots) +
                      " slots: give more slots (host:N, slots=N) or --oversubscribe");
  }
  std::vector<int> hostOf;  // slot by slot, host after host; past the slots, again from the first
  while (static_cast<int>(hostOf.size()) < n) {
    for (size_t h = 0; h < hosts.size() && static_cast<int>(hostOf.size()) < n; ++h) {
      for (int k = 0; k < hosts[h].slots && static_cast<int>(hostOf.size()) < n; ++k) hostOf.push_back(int(h));
    }
  }
  // Local rank and size per machine: every entry naming this host is one machine, and so are
  // entries repeating a name.
  std::vector<std::string> machineOf(hosts.size());
  for (size_t h = 0; h < hosts.size(); ++h) machineOf[h] = hosts[h].local ? std::string() : hosts[h].name;
  std::map<std::string, int> machineSize;
  std::vector<int> localRank(n);
  for (int r = 0; r < n; ++r) localRank[r] = machineSize[machineOf[hostOf[r]]]++;
  std::vector<std::string> rshWords = splitWords(rsh);
  bool allLocal = true;
  for (int h : hostOf) allLocal = allLocal && hosts[h].local;
  if (!allLocal && rshWords.empty()) return usageError("--rsh is empty: it must start ranks on other hosts");

  // Rank 0's host serves the bootstrap root: a port known free when that is this host.
  const Host& rootHost = hosts[hostOf[0]];
  std::string rootName = rootHost.name;
  int port = 0;
  if (rootHost.local) {
    port = chorus::freeTcpPort(allLocal);
    if (port < 0) {
      std::fprintf(stderr, "chorusrun: cannot find a free TCP port on this host\n");
      return 1;
    }
    if (allLocal) {
      rootName = "127.0.0.1";
    } else {
      rootName = chorus::hostName();
    }
  } else {
    port = 20000 + static_cast<int>(chorus::randomU64() % 12768);  // below the usual ephemeral range
  }
  char secret[40];
  std::snprintf(secret, sizeof(secret), "%016llx%016llx", static_cast<unsigned long long>(chorus::randomU64()),
                static_cast<unsigned long long>(chorus::randomU64()));
  const std::string commId =
      (rootName.find(':') != std::string::npos ? "[" + rootName + "]" : rootName) + ":" + std::to_string(port);

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A remote shell that fails before reading its input must not take chorusrun down with it.
  ::signal(SIGPIPE, SIG_IGN);
  const pid_t self = ::getpid();

  std::vector<Child> children(n);
  for (int r = 0; r < n; ++r) {
    const Host& host = hosts[hostOf[r]];
    std::vector<std::string> env = {"CHORUS_COMM_ID=" + commId, "CHORUS_RANK=" + std::to_string(r),
                                    "CHORUS_NRANKS=" + std::to_string(n),
                                    "CHORUS_LOCAL_RANK=" + std::to_string(localRank[r]),
                                    "CHORUS_LOCAL_SIZE=" + std::to_string(machineSize[machineOf[hostOf[r]]])};
    std::vector<std::string> argvOf = cmd;
    if (!host.local) {
      env.insert(env.end(), passed.begin(), passed.end());
      const std::string remote = remoteCommand(env, cmd, grace);
      argvOf.clear();
      bool hasCmd = false;
      for (std::string w : rshWords) {
        if (w == "{cmd}") {
          argvOf.push_back(remote);
          hasCmd = true;
          continue;
        }
        for (size_t at; (at = w.find("{host}")) != std::string::npos;) w.replace(at, 6, host.name);
        argvOf.push_back(w);
      }
      if (!hasCmd) argvOf.push_back(remote);
    }
    int outPipe[2] = {-1, -1};
    int errPipe[2] = {-1, -1};
    int inPipe[2] = {-1, -1};
    if (tag && (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0)) {
      std::perror("chorusrun: pipe");
      return 1;
    }
    if (!host.local && ::pipe2(inPipe, O_CLOEXEC) != 0) {
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
      // A process group per rank: stopping a rank stops what it started too.
      ::setpgid(0, 0);
      ::signal(SIGPIPE, SIG_DFL);
      if (tag) {
        ::dup2(outPipe[1], 1);
        ::dup2(errPipe[1], 2);
      }
      if (host.local) {
        // Its own process group is in the background of any terminal: reading one would stop it
        // (SIGTTIN). Ranks read nothing, as mpirun gives its ranks but rank 0.
        const int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devNull >= 0) ::dup2(devNull, 0);
        ::setenv("CHORUS_COMM_SECRET", secret, 1);
        for (const std::string& e : env) {
          const size_t eq = e.find('=');
          ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
        }
      } else {
        ::dup2(inPipe[0], 0);
      }
      std::vector<char*> execArgs;
      for (auto& a : argvOf) execArgs.push_back(a.data());
      execArgs.push_back(nullptr);
      ::execvp(execArgs[0], execArgs.data());
      std::fprintf(stderr, "chorusrun: cannot run %s%s: %s\n", execArgs[0],
                   host.local ? "" : (" (the --rsh template, to reach host " + host.name + ")").c_str(),
                   std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    children[r].pid = pid;
    children[r].rank = r;
    if (tag) {
      ::close(outPipe[1]);
      ::close(errPipe[1]);
      children[r].out = chorus::UniqueFd(outPipe[0]);
      children[r].err = chorus::UniqueFd(errPipe[0]);
    }
    if (!host.local) {
      children[r].remote = true;
      ::close(inPipe[0]);
      children[r].in = chorus::UniqueFd(inPipe[1]);
      const std::string line = std::string(secret) + "\n";
      if (::write(children[r].in.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        // The remote shell ended before reading: its exit status will say why.
        children[r].in.reset();
      }
    }
  }

  int exitCode = 0;
  int running = n;
  int64_t killAt = 0;
  bool terminated = false;
  auto terminateAll = [&](int sig) {
    for (auto& c : children) {
      // A remote rank is stopped by its own shell when its input closes; the remote-shell
      // process alone is signalled, not its group (with a local template such as `ip netns
      // exec`, that group holds the watching shell). A local rank's whole group is signalled.
      c.in.reset();
      if (c.running) ::kill(c.remote ? c.pid : -c.pid, sig);
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
        if (code == 0 || terminated) continue;
        std::fprintf(stderr, "chorusrun: rank %d (pid %d) %s %d; %s\n", c.rank, pid,
                     WIFEXITED(status) ? "exited with code" : "was killed by signal",
                     WIFEXITED(status) ? code : WTERMSIG(status),
                     keepGoing ? "the other ranks go on (--keep-going)" : "stopping the other ranks");
        if (keepGoing) {
          if (exitCode == 0) exitCode = code;  // the first failure's code, once all are done
          continue;
        }
        exitCode = code;
        terminated = true;
        terminateAll(SIGTERM);
        killAt = chorus::nowNs() + static_cast<int64_t>(grace * 1e9);
      }
    }
    if (terminated && killAt && chorus::nowNs() > killAt) {
      terminateAll(SIGKILL);
      killAt = 0;
    }
  }
  return exitCode;
}
