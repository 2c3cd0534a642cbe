// The settings registry (src/common/settings.h): every declaration against docs/environment.md both
// ways, and the snapshot's reading, checking, plan text and unknown-name warnings. Linked from the
// library's objects themselves (not the static archive, which would leave out the files no test
// calls into, and their declarations with them), so the registry is the library's whole.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "src/common/config.h"
#include "src/common/settings.h"

using namespace chorus;

namespace {

// Sets a variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old;
    had_ = old != nullptr;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::string old_;
  bool had_ = false;
};

struct DocRow {
  std::string section;
  bool plan = false;  // the meaning starts with *plan*
};

// The CHORUS_* names in the first cell of every table row of docs/environment.md, with the
// section they are in. Tests' own variables and NCCL's names are not settings of the library.
std::map<std::string, DocRow> documented() {
  std::ifstream in(std::string(CHORUS_SOURCE_DIR) + "/docs/environment.md");
  REQUIRE(in.good());
  std::map<std::string, DocRow> rows;
  std::string section;
  std::string line;
  const std::regex name("`(CHORUS_[A-Z0-9_]+)`");
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) section = line.substr(3);
    if (line.rfind("| `", 0) != 0) continue;
    if (section == "Read by the tests" || section == "Read by the build" || section.rfind("NCCL's names", 0) == 0) {
      continue;
    }
    const size_t cellEnd = line.find(" |", 2);
    const std::string first = line.substr(0, cellEnd);
    const bool plan = line.find("| *plan*") != std::string::npos;
    for (std::sregex_iterator it(first.begin(), first.end(), name), end; it != end; ++it) {
      rows[(*it)[1]] = DocRow{section, plan};
    }
  }
  return rows;
}

}  // namespace

TEST_CASE("every declared setting is documented, and every documented one declared", "[settings]") {
  const std::map<std::string, DocRow> docs = documented();
  REQUIRE(docs.size() > 40);
  std::set<std::string> declared;
  for (const Setting* s : settingRegistry()) {
    INFO(s->name());
    CHECK(std::string(s->name()).rfind("CHORUS_", 0) == 0);
    CHECK(std::string(s->doc()).size() > 3);
    CHECK(declared.insert(s->name()).second);  // one declaration a name
    const auto it = docs.find(s->name());
    CHECK(it != docs.end());  // declared but not in docs/environment.md
    if (it == docs.end()) continue;
    // Plan settings, and only they, say so where they are documented.
    CHECK(it->second.plan == (s->scope() == SettingScope::kPlan));
    // Launchers' variables are in the launchers' sections; the library's in its own table.
    if (s->scope() == SettingScope::kLaunch && std::string(s->name()) != "CHORUS_COMM_ID" &&
        std::string(s->name()) != "CHORUS_COMM_SECRET") {
      CHECK((it->second.section.rfind("Read by chorusrun", 0) == 0 ||
             it->second.section.rfind("Set by launchers", 0) == 0));
    }
  }
  for (const auto& [name, row] : docs) {
    INFO(name << " (docs/environment.md, " << (row.section.empty() ? "the main table" : row.section) << ")");
    CHECK(declared.count(name) == 1);  // documented but declared nowhere
  }
}

TEST_CASE("the snapshot: defaults, values, and what a bad value says", "[settings]") {
  const IntSetting* slots = dynamic_cast<const IntSetting*>(findSetting("CHORUS_SLOTS"));
  const TextSetting* algo = dynamic_cast<const TextSetting*>(findSetting("CHORUS_ALGO"));
  const IntSetting* oneCopy = dynamic_cast<const IntSetting*>(findSetting("CHORUS_ONECOPY"));
  REQUIRE(slots);
  REQUIRE(algo);
  REQUIRE(oneCopy);
  ::unsetenv("CHORUS_SLOTS");
  ::unsetenv("CHORUS_ALGO");
  ::unsetenv("CHORUS_ONECOPY");
  {
    Result<EnvSnapshot> s = EnvSnapshot::fromEnv();
    REQUIRE(s.isOk());
    CHECK(slots->get(s.value()) == 8);
    CHECK_FALSE(s.value().given(*slots));
    CHECK(algo->get(s.value()).empty());
    CHECK(oneCopy->describe(s.value()) == "unset");  // a default outside the range
    CHECK(slots->describe(s.value()) == "8");
  }
  {
    ScopedEnv a("CHORUS_SLOTS", "16");
    ScopedEnv b("CHORUS_ALGO", "Ring");
    Result<EnvSnapshot> s = EnvSnapshot::fromEnv();
    REQUIRE(s.isOk());
    CHECK(slots->get(s.value()) == 16);
    CHECK(s.value().given(*slots));
    CHECK(algo->get(s.value()) == "ring");  // kept in lower case
    const std::vector<std::string> lines = s.value().setLines();
    CHECK(std::count(lines.begin(), lines.end(), "CHORUS_SLOTS set by environment to 16") == 1);
    CHECK(std::count(lines.begin(), lines.end(), "CHORUS_ALGO set by environment to Ring") == 1);
    CHECK(slots->current().value() == 16);
  }
  for (const char* bad : {"12", "1", "128", "8k", "-8"}) {
    INFO(bad);
    ScopedEnv a("CHORUS_SLOTS", bad);
    Result<EnvSnapshot> s = EnvSnapshot::fromEnv();
    REQUIRE_FALSE(s.isOk());
    CHECK(s.status().code() == chorusInvalidArgument);
    CHECK(s.status().message().find(std::string("CHORUS_SLOTS=") + bad) != std::string::npos);
    CHECK_FALSE(slots->current().isOk());
  }
  {
    // Settings read outside a communicator are checked at every init too.
    ScopedEnv a("CHORUS_IB_TIMEOUT", "40");
    Result<EnvSnapshot> s = EnvSnapshot::fromEnv();
    REQUIRE_FALSE(s.isOk());
    CHECK(s.status().message().find("CHORUS_IB_TIMEOUT=40 is not an integer in [1, 31]") != std::string::npos);
  }
  {
    // Launchers' variables are theirs: never refused at init.
    ScopedEnv a("CHORUS_RANK", "not a number");
    CHECK(EnvSnapshot::fromEnv().isOk());
  }
}

TEST_CASE("unknown CHORUS_ names are reported with the nearest setting; secrets are never echoed", "[settings]") {
  ScopedEnv a("CHORUS_NCHANNEL", "2");
  ScopedEnv b("CHORUS_TEST_SOMETHING", "1");
  ScopedEnv c("CHORUS_COMM_SECRET", "hush");
  ScopedEnv d("CHORUS_CUDA_ARCHITECTURES", "90");  // tools/setup.sh's, not the library's
  ScopedEnv e("CHORUS_JOBS", "2");
  Result<EnvSnapshot> s = EnvSnapshot::fromEnv();
  REQUIRE(s.isOk());
  const std::vector<std::string> w = s.value().unknownWarnings();
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("CHORUS_NCHANNEL is not a Chorus setting") != std::string::npos);
  CHECK(w[0].find("did you mean CHORUS_NCHANNELS?") != std::string::npos);
  const std::vector<std::string> lines = s.value().setLines();
  CHECK(std::count(lines.begin(), lines.end(), "CHORUS_COMM_SECRET set by environment (value redacted)") == 1);
  for (const std::string& l : lines) CHECK(l.find("hush") == std::string::npos);
}

TEST_CASE("the plan text: every plan setting, and only those, compared line by line", "[settings]") {
  ::unsetenv("CHORUS_NCHANNELS");
  Result<EnvSnapshot> s = EnvSnapshot::fromEnv();
  REQUIRE(s.isOk());
  const std::string text = s.value().planText();
  size_t planned = 0;
  for (const Setting* x : settingRegistry()) {
    const bool in = text.find(std::string(x->name()) + "=") != std::string::npos;
    CHECK(in == (x->scope() == SettingScope::kPlan));
    planned += x->scope() == SettingScope::kPlan;
  }
  CHECK(std::count(text.begin(), text.end(), '\n') == static_cast<long>(planned));
  CHECK(comparePlans(text, text).empty());

  ScopedEnv a("CHORUS_NCHANNELS", "4");
  Result<EnvSnapshot> t = EnvSnapshot::fromEnv();
  REQUIRE(t.isOk());
  const std::vector<PlanDifference> d = comparePlans(text, t.value().planText());
  REQUIRE(d.size() == 1);
  CHECK(d[0].name == "CHORUS_NCHANNELS");
  CHECK(d[0].first == "1");
  CHECK(d[0].second == "4");
  // A name one side lacks (a rank of another build) differs from "unset".
  const std::vector<PlanDifference> e = comparePlans("CHORUS_A=1\nCHORUS_B=2\n", "CHORUS_B=2\nCHORUS_C=3\n");
  REQUIRE(e.size() == 2);
  CHECK((e[0].name == "CHORUS_A" && e[0].first == "1" && e[0].second == "unset"));
  CHECK((e[1].name == "CHORUS_C" && e[1].first == "unset" && e[1].second == "3"));
}

TEST_CASE("Config reads its settings through the registry", "[settings]") {
  ScopedEnv a("CHORUS_SLOT_BYTES", "4096");
  ScopedEnv b("CHORUS_TIMEOUT", "7");
  Result<Config> c = Config::fromEnv();
  REQUIRE(c.isOk());
  CHECK(c.value().slotBytes == 4096);
  CHECK(c.value().timeoutNs == int64_t(7) * 1000000000);
  CHECK(c.value().env.given(*findSetting("CHORUS_TIMEOUT")));
}
