// What the ibverbs network (transports/ib/ib_net.h) decides before it opens anything,
// as pure functions so that they are tested without a NIC: which HCAs and ports to use
// (NCCL_IB_HCA's syntax) and which GID of a port to use (NCCL's rules for RoCE and InfiniBand).
//
// HCA lists: comma-separated `name[:port]` entries; a leading `^` excludes the listed devices
// instead of selecting them; a leading `=` (after `^` when both) matches names exactly instead of
// by prefix. No port (or an empty one) matches every port. An empty list selects everything.
//
// GID choice, for a port's table (index = position):
//   - InfiniBand link layer: the index `routableFlidIndex` when that GID carries a FLID (bytes 4
//     and 5, the routable fabric LID), else 0.
//   - RoCE: `forcedIndex` when set. Else, from index 0, each later GID replaces the choice when it
//     is of the wanted address family (IPv4-mapped GIDs are AF_INET) and inside the wanted range
//     while the choice is of the other family; or when it is of that family, usable (configured
//     and not link-local), inside the range, of the wanted RoCE version, and the choice is of
//     another version or unusable.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "src/common/status.h"

namespace chorus {
namespace ib {

struct HcaEntry {
  std::string name;  // a prefix, or the exact name with HcaList::exact
  int port = -1;     // -1: every port
};
struct HcaList {
  bool exclude = false;
  bool exact = false;
  std::vector<HcaEntry> entries;
};
// An error names the entry that is wrong (an empty name, a port that is not a number from 1).
Result<HcaList> parseHcaList(const std::string& spec);
bool hcaSelected(const HcaList& list, const std::string& device, int port);

struct Gid {
  std::array<uint8_t, 16> raw{};
  int roceVersion = 0;  // 1, 2, or 0 when unknown (InfiniBand)
};
struct GidRule {
  int forcedIndex = -1;             // NCCL_IB_GID_INDEX's counterpart; -1: choose
  sa_family_t family = AF_INET;     // the wanted address family
  bool hasRange = false;            // an address range was given
  std::array<uint8_t, 16> range{};  // its address (AF_INET: the first 4 bytes)
  int rangeBits = 0;
  int roceVersion = 2;        // the wanted RoCE version
  int routableFlidIndex = 1;  // InfiniBand: the index to try for a routable FLID
};
// From the settings' text (each may be empty: the default): an index from 0, "AF_INET" or
// "AF_INET6", "address/bits" in that family, a RoCE version 1 or 2. Errors say what to fix.
Result<GidRule> parseGidRule(const std::string& index, const std::string& family, const std::string& range,
                             const std::string& roceVersion);

sa_family_t gidFamily(const Gid& gid);
bool gidUsable(const Gid& gid);  // configured (not zero, not a bare fe80::) and not link-local
uint16_t gidFlid(const Gid& gid);
bool gidInRange(const GidRule& rule, const Gid& gid);
// The index to use (0 for an empty table).
int chooseGidIndex(const std::vector<Gid>& table, bool infiniband, const GidRule& rule);

}  // namespace ib
}  // namespace chorus
