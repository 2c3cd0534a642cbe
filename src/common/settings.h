// Settings: every CHORUS_* environment variable, declared beside the code that reads it, as NCCL's
// NCCL_PARAM, and collected in one registry.
//
// A declaration is an object at namespace scope with its name, default, range, one doc line and
// scope:
//
//   const IntSetting kSlotBytes{"CHORUS_SLOT_BYTES", 128 * 1024, 4096, int64_t(64) << 20, SettingScope::kPlan,
//                               "payload bytes of one FIFO slot", multipleOf64};
//
// Its constructor enrols it in the registry (settingRegistry()), so that every setting of a program
// is known once its objects are loaded: static initialisation (or dlopen of libchorus.so), before
// anything reads the registry, which is never written after. At each communicator's init,
// EnvSnapshot::fromEnv() reads every registered setting once into an immutable snapshot and
// validates it (a bad value fails init, naming the variable, its value and what to set); the
// communicator logs every one set at INFO, warns about CHORUS_* names no declaration has, and
// compares the values of the kPlan settings across ranks (EnvSnapshot::planText). Code that runs
// outside a communicator (a transport's process-wide state, the bootstrap id, the launcher's
// variables) reads its declaration's current() value with the same parser. tests/settings_test.cc
// holds the registry against docs/environment.md both ways.
//
// Thread-safe: declarations and snapshots are immutable once made.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/common/status.h"

namespace chorus {

// Where a setting is read and whether ranks must agree on it.
enum class SettingScope {
  kRank,     // at each communicator's init; may differ between ranks
  kPlan,     // at each communicator's init; changes the plan, so every rank must set the same (checked at init)
  kProcess,  // once per process where it is used (a network's or the device runtime's state); checked at init too
  kLaunch,   // set or read by launchers (chorusrun, chorusCommInitFromEnv); no value is checked at init
};

class EnvSnapshot;

class Setting {
 public:
  Setting(const Setting&) = delete;
  Setting& operator=(const Setting&) = delete;
  virtual ~Setting() = default;

  const char* name() const { return name_; }
  SettingScope scope() const { return scope_; }
  const char* doc() const { return doc_; }
  int index() const { return index_; }
  // The value given (the environment's, else the default), as text, the way ranks compare it: an
  // integer in decimal, a default outside the range as "unset".
  virtual std::string describe(const EnvSnapshot& s) const = 0;

 protected:
  Setting(const char* name, SettingScope scope, const char* doc);

 private:
  friend class EnvSnapshot;
  // Parses `value` (never null or empty) into the snapshot's slot: an error names the variable.
  virtual Status parse(const char* value, EnvSnapshot* s) const = 0;
  virtual void setDefault(EnvSnapshot* s) const = 0;
  const char* name_;
  SettingScope scope_;
  const char* doc_;
  int index_;
};

// An integer in [lo, hi], optionally with a rule of its own (a multiple of 64, a power of two).
// The default may lie outside the range: it then means "not given" (chosen elsewhere).
class IntSetting : public Setting {
 public:
  using Rule = Status (*)(const char* name, int64_t value);
  IntSetting(const char* name, int64_t defaultValue, int64_t lo, int64_t hi, SettingScope scope, const char* doc,
             Rule rule = nullptr)
      : Setting(name, scope, doc), default_(defaultValue), lo_(lo), hi_(hi), rule_(rule) {}

  int64_t defaultValue() const { return default_; }
  int64_t lo() const { return lo_; }
  int64_t hi() const { return hi_; }
  int64_t get(const EnvSnapshot& s) const;
  // The environment's value now, parsed as at init (code that runs outside a communicator).
  Result<int64_t> current() const;
  std::string describe(const EnvSnapshot& s) const override;

 private:
  Status parse(const char* value, EnvSnapshot* s) const override;
  void setDefault(EnvSnapshot* s) const override;
  Status check(const char* value, int64_t* out) const;
  int64_t default_;
  int64_t lo_;
  int64_t hi_;
  Rule rule_;
};

// 0 or 1.
class BoolSetting : public IntSetting {
 public:
  BoolSetting(const char* name, bool defaultValue, SettingScope scope, const char* doc)
      : IntSetting(name, defaultValue ? 1 : 0, 0, 1, scope, doc) {}
  bool get(const EnvSnapshot& s) const { return IntSetting::get(s) != 0; }
};

// Text, checked by a rule of its own when it has one; `lowerCase`: kept and compared in lower case
// (names such as CHORUS_ALGO's, which match whatever their case).
class TextSetting : public Setting {
 public:
  using Rule = Status (*)(const char* name, const std::string& value);
  TextSetting(const char* name, SettingScope scope, const char* doc, Rule rule = nullptr, bool lowerCase = false)
      : Setting(name, scope, doc), rule_(rule), lower_(lowerCase) {}

  // Empty when not given.
  const std::string& get(const EnvSnapshot& s) const;
  // The environment's value now (empty: unset), checked as at init.
  Result<std::string> current() const;
  // The environment's value now, unchecked (for a setting without a rule).
  std::string raw() const;
  std::string describe(const EnvSnapshot& s) const override;

 private:
  Status parse(const char* value, EnvSnapshot* s) const override;
  void setDefault(EnvSnapshot* s) const override;
  Status check(const char* value, std::string* out) const;
  Rule rule_;
  bool lower_;
};

// A variable's value; null when it is unset or empty (both mean "not given").
const char* envValue(const char* name);
// `text` as an integer in [lo, hi] into *out; anything else is an error that names the variable,
// its value and the range: the one parser of integer variables (IntSetting, readEnvInt).
Status parseIntInRange(const char* name, const char* text, int64_t lo, int64_t hi, int64_t* out);

// Rules shared by several settings.
Status multipleOf64(const char* name, int64_t value);
Status powerOfTwo(const char* name, int64_t value);

// Every declaration of this program, by name.
std::vector<const Setting*> settingRegistry();
// The declaration of `name`, or null.
const Setting* findSetting(const std::string& name);

// Every registered setting's value, read from the environment once. Immutable once made.
class EnvSnapshot {
 public:
  // Every setting at its default (a snapshot of an empty environment).
  EnvSnapshot();
  // Reads and checks every setting but the launchers' (kLaunch); the first bad value is the error.
  static Result<EnvSnapshot> fromEnv();

  // Whether the environment gave `s` a value.
  bool given(const Setting& s) const;
  // The kPlan settings' values, a line "NAME=value" each, in name order: what ranks compare.
  std::string planText() const;
  // "NAME set by environment to VALUE" for every setting given (a secret's value redacted), and a
  // warning for every CHORUS_* variable that no declaration has (with the nearest name).
  const std::vector<std::string>& setLines() const { return setLines_; }
  const std::vector<std::string>& unknownWarnings() const { return unknown_; }

 private:
  friend class IntSetting;
  friend class TextSetting;
  std::vector<int64_t> ints_;
  std::vector<std::string> texts_;
  std::vector<bool> given_;
  std::vector<std::string> setLines_;
  std::vector<std::string> unknown_;
};

// Every setting whose line differs between two planText()s, with both values (a name on one side
// only is "unset" on the other); empty when they agree.
struct PlanDifference {
  std::string name;
  std::string first;
  std::string second;
};
std::vector<PlanDifference> comparePlans(const std::string& a, const std::string& b);

}  // namespace chorus
