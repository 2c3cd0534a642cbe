#include "src/algo/algorithm.h"

#include <cctype>

namespace chorus {

// The registry, in the order of Algo: one line per algorithm, each defined in its own file of
// src/algo (the build takes every file there).
#define CHORUS_ALGORITHMS(X) \
  X(ringAlgorithm)           \
  X(directAlgorithm)         \
  X(treeAlgorithm)           \
  X(sliceAlgorithm)          \
  X(oneCopyAlgorithm)        \
  /* the registry ends here */

#define CHORUS_DECLARE_ALGORITHM(f) const Algorithm& f();
CHORUS_ALGORITHMS(CHORUS_DECLARE_ALGORITHM)
#undef CHORUS_DECLARE_ALGORITHM

namespace {
#define CHORUS_ALGORITHM_ENTRY(f) &f,
const Algorithm& (*const kRegistry[])() = {CHORUS_ALGORITHMS(CHORUS_ALGORITHM_ENTRY)};
#undef CHORUS_ALGORITHM_ENTRY
}  // namespace

// The core keeps a bit per algorithm (algoBit).
static_assert(sizeof(kRegistry) / sizeof(kRegistry[0]) <= 32, "at most 32 algorithms");

int algorithmCount() { return static_cast<int>(sizeof(kRegistry) / sizeof(kRegistry[0])); }

const Algorithm& algorithm(Algo a) { return kRegistry[static_cast<size_t>(a)](); }

const char* algoName(Algo a) { return static_cast<int>(a) < algorithmCount() ? algorithm(a).name() : "?"; }

Result<std::optional<Algo>> parseAlgoSetting(const std::string& value) {
  if (value.empty()) return std::optional<Algo>();
  std::string lower = value;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string names;
  for (int i = 0; i < algorithmCount(); ++i) {
    const Algorithm& a = algorithm(static_cast<Algo>(i));
    if (!a.runs(CollType::kAllReduce)) continue;
    if (lower == a.name()) return std::optional<Algo>(static_cast<Algo>(i));
    names += std::string(names.empty() ? "" : ", ") + a.name();
  }
  return invalidArgument("CHORUS_ALGO=" + value + " is not an algorithm this build has (" + names +
                         "); unset it to let Chorus choose");
}

std::vector<int> AlgoContext::treeChildren(int t) const {
  std::vector<int> children;
  for (int r = 0; r < nranks; ++r) {
    if ((*treeParent[t])[r] == rank) children.push_back(r);
  }
  return children;
}

}  // namespace chorus
