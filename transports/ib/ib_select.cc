#include "transports/ib/ib_select.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <cstring>

namespace chorus {
namespace ib {
namespace {

bool parseInt(const std::string& s, int lo, int hi, int* out) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  const int v = std::atoi(s.c_str());
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool prefixMatches(const uint8_t* a, const uint8_t* b, int bits) {
  for (int i = 0; bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a[i] & mask) != (b[i] & mask)) return false;
  }
  return true;
}

}  // namespace

Result<HcaList> parseHcaList(const std::string& spec) {
  HcaList list;
  size_t at = 0;
  if (at < spec.size() && spec[at] == '^') {
    list.exclude = true;
    ++at;
  }
  if (at < spec.size() && spec[at] == '=') {
    list.exact = true;
    ++at;
  }
  while (at < spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string entry = spec.substr(at, comma - at);
    at = comma + 1;
    const size_t colon = entry.find(':');
    HcaEntry e;
    e.name = entry.substr(0, colon);
    if (e.name.empty()) {
      return invalidArgument("the HCA list '" + spec + "' has an entry without a device name ('" + entry +
                             "'): write name[:port], comma-separated");
    }
    if (colon != std::string::npos && colon + 1 < entry.size() && !parseInt(entry.substr(colon + 1), 1, 255, &e.port)) {
      return invalidArgument("the HCA list '" + spec + "' gives device " + e.name + " the port '" +
                             entry.substr(colon + 1) + "': a port is a number from 1 to 255");
    }
    list.entries.push_back(e);
  }
  return list;
}

bool hcaSelected(const HcaList& list, const std::string& device, int port) {
  if (list.entries.empty()) return true;
  bool listed = false;
  for (const HcaEntry& e : list.entries) {
    const bool name = list.exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (name && (e.port == -1 || port == -1 || e.port == port)) listed = true;
  }
  return listed != list.exclude;
}

Result<GidRule> parseGidRule(const std::string& index, const std::string& family, const std::string& range,
                             const std::string& roceVersion) {
  GidRule r;
  if (!index.empty() && !parseInt(index, 0, 65535, &r.forcedIndex)) {
    return invalidArgument("the GID index '" + index + "' is not a number from 0 to 65535");
  }
  if (family == "AF_INET6") {
    r.family = AF_INET6;
  } else if (!family.empty() && family != "AF_INET") {
    return invalidArgument("the address family '" + family + "' is neither AF_INET nor AF_INET6");
  }
  if (!roceVersion.empty() && !parseInt(roceVersion, 1, 2, &r.roceVersion)) {
    return invalidArgument("the RoCE version '" + roceVersion + "' is neither 1 nor 2");
  }
  if (!range.empty()) {
    const size_t slash = range.find('/');
    const int maxBits = r.family == AF_INET ? 32 : 128;
    const std::string addr = range.substr(0, slash);
    if (slash == std::string::npos || !parseInt(range.substr(slash + 1), 0, maxBits, &r.rangeBits) ||
        ::inet_pton(r.family, addr.c_str(), r.range.data()) != 1) {
      return invalidArgument("the address range '" + range + "' is not address/bits in " +
                             (r.family == AF_INET ? "AF_INET (10.1.0.0/16)" : "AF_INET6 (fd00::/64)") +
                             " with bits from 0 to " + std::to_string(maxBits));
    }
    r.hasRange = true;
  }
  return r;
}

sa_family_t gidFamily(const Gid& gid) {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const uint8_t kMappedMulticast[12] = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const bool v4 =
      std::memcmp(gid.raw.data(), kMapped, 12) == 0 || std::memcmp(gid.raw.data(), kMappedMulticast, 12) == 0;
  return v4 ? AF_INET : AF_INET6;
}

bool gidUsable(const Gid& gid) {
  const uint8_t* a = gid.raw.data();
  bool restZero = true;  // bytes 4..15
  for (int i = 4; i < 16; ++i) restZero = restZero && a[i] == 0;
  const bool headZero = a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0;
  const bool fe80 = a[0] == 0xfe && a[1] == 0x80 && a[2] == 0 && a[3] == 0;
  const bool configured = !((headZero || fe80) && restZero);
  const bool linkLocal = fe80 && a[4] == 0 && a[5] == 0 && a[6] == 0 && a[7] == 0;
  return configured && !linkLocal;
}

uint16_t gidFlid(const Gid& gid) { return static_cast<uint16_t>(gid.raw[4] << 8 | gid.raw[5]); }

bool gidInRange(const GidRule& rule, const Gid& gid) {
  if (!rule.hasRange) return true;
  return rule.family == AF_INET ? prefixMatches(rule.range.data(), gid.raw.data() + 12, rule.rangeBits)
                                : prefixMatches(rule.range.data(), gid.raw.data(), rule.rangeBits);
}

int chooseGidIndex(const std::vector<Gid>& table, bool infiniband, const GidRule& rule) {
  const int n = static_cast<int>(table.size());
  if (infiniband) {
    return rule.routableFlidIndex < n && gidFlid(table[static_cast<size_t>(rule.routableFlidIndex)]) != 0
               ? rule.routableFlidIndex
               : 0;
  }
  if (rule.forcedIndex >= 0) return rule.forcedIndex;
  int chosen = 0;
  for (int c = 1; c < n; ++c) {
    const Gid& cand = table[static_cast<size_t>(c)];
    const Gid& cur = table[static_cast<size_t>(chosen)];
    const bool inRange = gidInRange(rule, cand);
    if (gidFamily(cand) != gidFamily(cur) && gidFamily(cand) == rule.family && inRange) {
      chosen = c;
      continue;
    }
    if (gidFamily(cand) != rule.family || !gidUsable(cand) || !inRange) continue;
    if ((cur.roceVersion != cand.roceVersion || !gidUsable(cur)) && cand.roceVersion == rule.roceVersion) chosen = c;
  }
  return chosen;
}

}  // namespace ib
}  // namespace chorus
