#include "src/algo/connections.h"

namespace chorus {

const char* connFamilyName(ConnFamily f) {
  switch (f) {
    case ConnFamily::kRing:
      return "Channel";
    case ConnFamily::kP2p:
      return "P2P";
    case ConnFamily::kDirect:
      return "Direct";
    case ConnFamily::kGather:
      return "Gather";
  }
  return "?";
}

}  // namespace chorus
