#include "src/common/settings.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string_view>

namespace chorus {
namespace {

// The declarations, in the order they were made. Appended only by constructors of objects of
// static storage duration (before main, or while dlopen runs the library's initialisers), read
// only after: no lock.
std::vector<const Setting*>& registry() {
  static std::vector<const Setting*> r;
  return r;
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const char* envValue(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

Status parseIntInRange(const char* name, const char* text, int64_t lo, int64_t hi, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || x < lo || x > hi) {
    return invalidArgument(std::string(name) + "=" + text + " is not an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]; unset it or give such a number");
  }
  *out = x;
  return Status::ok();
}

Setting::Setting(const char* name, SettingScope scope, const char* doc)
    : name_(name), scope_(scope), doc_(doc), index_(static_cast<int>(registry().size())) {
  registry().push_back(this);
}

std::vector<const Setting*> settingRegistry() {
  std::vector<const Setting*> all = registry();
  std::sort(all.begin(), all.end(),
            [](const Setting* a, const Setting* b) { return std::string_view(a->name()) < b->name(); });
  return all;
}

const Setting* findSetting(const std::string& name) {
  for (const Setting* s : registry()) {
    if (name == s->name()) return s;
  }
  return nullptr;
}

Status multipleOf64(const char* name, int64_t value) {
  if (value % 64 == 0) return Status::ok();
  return invalidArgument(std::string(name) + "=" + std::to_string(value) + " is not a multiple of 64; set one");
}

Status powerOfTwo(const char* name, int64_t value) {
  if (value > 0 && (value & (value - 1)) == 0) return Status::ok();
  return invalidArgument(std::string(name) + "=" + std::to_string(value) +
                         " is not a power of two: set 2, 4, 8, 16, 32 or 64");
}

// ---- integers ----

Status IntSetting::check(const char* value, int64_t* out) const {
  int64_t x = 0;
  CHORUS_TRY(parseIntInRange(name(), value, lo_, hi_, &x));
  if (rule_) CHORUS_TRY(rule_(name(), x));
  *out = x;
  return Status::ok();
}

Status IntSetting::parse(const char* value, EnvSnapshot* s) const { return check(value, &s->ints_[index()]); }

void IntSetting::setDefault(EnvSnapshot* s) const { s->ints_[index()] = default_; }

int64_t IntSetting::get(const EnvSnapshot& s) const {
  return static_cast<size_t>(index()) < s.ints_.size() ? s.ints_[index()] : default_;
}

Result<int64_t> IntSetting::current() const {
  int64_t x = default_;
  if (const char* v = envValue(name())) CHORUS_TRY(check(v, &x));
  return x;
}

std::string IntSetting::describe(const EnvSnapshot& s) const {
  const int64_t v = get(s);
  if (v == default_ && (v < lo_ || v > hi_)) return "unset";
  return std::to_string(v);
}

// ---- text ----

Status TextSetting::check(const char* value, std::string* out) const {
  std::string v(value);
  if (lower_) {
    for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  if (rule_) CHORUS_TRY(rule_(name(), v));
  *out = std::move(v);
  return Status::ok();
}

Status TextSetting::parse(const char* value, EnvSnapshot* s) const { return check(value, &s->texts_[index()]); }

void TextSetting::setDefault(EnvSnapshot* s) const { s->texts_[index()].clear(); }

const std::string& TextSetting::get(const EnvSnapshot& s) const {
  static const std::string kUnset;
  return static_cast<size_t>(index()) < s.texts_.size() ? s.texts_[index()] : kUnset;
}

Result<std::string> TextSetting::current() const {
  std::string out;
  if (const char* v = envValue(name())) CHORUS_TRY(check(v, &out));
  return out;
}

std::string TextSetting::raw() const {
  const char* v = envValue(name());
  return v ? v : "";
}

std::string TextSetting::describe(const EnvSnapshot& s) const {
  const std::string& v = get(s);
  return v.empty() ? "unset" : v;
}

// ---- the snapshot ----

EnvSnapshot::EnvSnapshot() : ints_(registry().size(), 0), texts_(registry().size()), given_(registry().size(), false) {
  for (const Setting* s : registry()) s->setDefault(this);
}

Result<EnvSnapshot> EnvSnapshot::fromEnv() {
  EnvSnapshot snap;
  for (const Setting* s : settingRegistry()) {
    const char* v = envValue(s->name());
    if (!v) continue;
    snap.given_[s->index()] = true;
    // A secret's value is never written anywhere: whoever reads it could join the job.
    snap.setLines_.push_back(s->scope() == SettingScope::kLaunch && std::string_view(s->name()) == "CHORUS_COMM_SECRET"
                                 ? std::string(s->name()) + " set by environment (value redacted)"
                                 : std::string(s->name()) + " set by environment to " + v);
    if (s->scope() != SettingScope::kLaunch) CHORUS_TRY(s->parse(v, &snap));
  }
  // CHORUS_* names no declaration has (a typo such as CHORUS_ALG), with the nearest known name.
  // Test programs' own variables (CHORUS_TEST_*, CHORUS_GRID*) are theirs, and tools/setup.sh's
  // (docs/environment.md, "Read by the build") its own.
  static constexpr std::string_view kBuildScript[] = {"CHORUS_JOBS", "CHORUS_TORCH_VENV", "CHORUS_CUDA_ARCHITECTURES"};
  const std::vector<const Setting*> all = settingRegistry();
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("CHORUS_", 0) != 0) continue;
    const std::string name(entry.substr(0, entry.find('=')));
    if (name.rfind("CHORUS_TEST_", 0) == 0 || name.rfind("CHORUS_GRID", 0) == 0) continue;
    if (std::find(std::begin(kBuildScript), std::end(kBuildScript), name) != std::end(kBuildScript)) continue;
    if (findSetting(name)) continue;
    const char* nearest = nullptr;
    size_t best = 4;
    for (const Setting* k : all) {
      const size_t d = editDistance(name, k->name());
      if (d < best) {
        best = d;
        nearest = k->name();
      }
    }
    snap.unknown_.push_back(name + " is not a Chorus setting and is ignored" +
                            (nearest ? std::string("; did you mean ") + nearest + "?" : std::string()) +
                            " (docs/environment.md lists them)");
  }
  return snap;
}

bool EnvSnapshot::given(const Setting& s) const {
  return static_cast<size_t>(s.index()) < given_.size() && given_[s.index()];
}

std::string EnvSnapshot::planText() const {
  std::string out;
  for (const Setting* s : settingRegistry()) {
    if (s->scope() != SettingScope::kPlan) continue;
    out += s->name();
    out += '=';
    out += s->describe(*this);
    out += '\n';
  }
  return out;
}

std::vector<PlanDifference> comparePlans(const std::string& a, const std::string& b) {
  // Lines "NAME=value", in name order on both sides; a name on one side only (a rank of another
  // build) differs from "unset" on the other.
  auto lines = [](const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(at, end - at);
      const size_t eq = line.find('=');
      if (eq != std::string::npos) out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
      at = end + 1;
    }
    return out;
  };
  const auto la = lines(a);
  const auto lb = lines(b);
  std::vector<PlanDifference> diffs;
  size_t i = 0;
  size_t j = 0;
  while (i < la.size() || j < lb.size()) {
    if (j == lb.size() || (i < la.size() && la[i].first < lb[j].first)) {
      diffs.push_back({la[i].first, la[i].second, "unset"});
      ++i;
    } else if (i == la.size() || lb[j].first < la[i].first) {
      diffs.push_back({lb[j].first, "unset", lb[j].second});
      ++j;
    } else {
      if (la[i].second != lb[j].second) diffs.push_back({la[i].first, la[i].second, lb[j].second});
      ++i;
      ++j;
    }
  }
  return diffs;
}

}  // namespace chorus
