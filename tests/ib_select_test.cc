// The ibverbs network's choices made without a NIC (transports/ib/ib_select.h): HCA lists in
// NCCL_IB_HCA's syntax, and the GID of a port from injected GID tables. "[ib_select]".
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transports/ib/ib_select.h"
#include "transports/ib/verbs.h"

using namespace chorus::ib;

namespace {

Gid ipv4(const char* addr, int roce) {
  Gid g;
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  REQUIRE(inet_pton(AF_INET, addr, g.raw.data() + 12) == 1);
  g.roceVersion = roce;
  return g;
}
Gid ipv6(const char* addr, int roce) {
  Gid g;
  REQUIRE(inet_pton(AF_INET6, addr, g.raw.data()) == 1);
  g.roceVersion = roce;
  return g;
}
GidRule rule(const std::string& index = "", const std::string& family = "", const std::string& range = "",
             const std::string& version = "") {
  auto r = parseGidRule(index, family, range, version);
  INFO(r.status().message());
  REQUIRE(r.isOk());
  return r.value();
}

}  // namespace

TEST_CASE("HCA lists select by prefix or exactly, by port, and exclude with a caret", "[ib_select]") {
  auto all = parseHcaList("");
  REQUIRE(all.isOk());
  CHECK(hcaSelected(all.value(), "mlx5_0", 1));

  auto some = parseHcaList("mlx5_0:1,mlx5_1");
  REQUIRE(some.isOk());
  REQUIRE(some.value().entries.size() == 2);
  CHECK(some.value().entries[0].port == 1);
  CHECK(some.value().entries[1].port == -1);
  CHECK(hcaSelected(some.value(), "mlx5_0", 1));
  CHECK_FALSE(hcaSelected(some.value(), "mlx5_0", 2));  // another port of a listed device
  CHECK(hcaSelected(some.value(), "mlx5_1", 2));        // every port
  CHECK(hcaSelected(some.value(), "mlx5_10", 1));       // a prefix: mlx5_1 matches mlx5_10
  CHECK_FALSE(hcaSelected(some.value(), "mlx5_2", 1));

  auto exact = parseHcaList("=mlx5_1");
  REQUIRE(exact.isOk());
  CHECK(exact.value().exact);
  CHECK(hcaSelected(exact.value(), "mlx5_1", 1));
  CHECK_FALSE(hcaSelected(exact.value(), "mlx5_10", 1));

  auto notThese = parseHcaList("^mlx5_3,mlx5_4:2");
  REQUIRE(notThese.isOk());
  CHECK(notThese.value().exclude);
  CHECK_FALSE(hcaSelected(notThese.value(), "mlx5_3", 1));
  CHECK_FALSE(hcaSelected(notThese.value(), "mlx5_4", 2));
  CHECK(hcaSelected(notThese.value(), "mlx5_4", 1));
  CHECK(hcaSelected(notThese.value(), "mlx5_0", 1));

  auto notExact = parseHcaList("^=mlx5_1");
  REQUIRE(notExact.isOk());
  CHECK(notExact.value().exclude);
  CHECK(notExact.value().exact);
  CHECK_FALSE(hcaSelected(notExact.value(), "mlx5_1", 1));
  CHECK(hcaSelected(notExact.value(), "mlx5_10", 1));
}

TEST_CASE("a wrong HCA list is an error that names the entry", "[ib_select]") {
  auto noName = parseHcaList("mlx5_0,:1");
  REQUIRE_FALSE(noName.isOk());
  CHECK(noName.status().message() ==
        "the HCA list 'mlx5_0,:1' has an entry without a device name (':1'): write name[:port], comma-separated");
  auto badPort = parseHcaList("mlx5_0:x");
  REQUIRE_FALSE(badPort.isOk());
  CHECK(badPort.status().message() ==
        "the HCA list 'mlx5_0:x' gives device mlx5_0 the port 'x': a port is a number from 1 to 255");
  CHECK_FALSE(parseHcaList("mlx5_0:0").isOk());
}

TEST_CASE("GIDs: family, usability, FLID and range of injected entries", "[ib_select]") {
  CHECK(gidFamily(ipv4("10.0.0.5", 2)) == AF_INET);
  CHECK(gidFamily(ipv6("fd00::5", 2)) == AF_INET6);
  CHECK(gidFamily(ipv6("ff0e::ffff:10.0.0.1", 2)) == AF_INET);  // IPv4-mapped multicast
  CHECK_FALSE(gidUsable(Gid{}));                                // unconfigured
  CHECK_FALSE(gidUsable(ipv6("fe80::", 0)));                    // a bare fe80::
  CHECK_FALSE(gidUsable(ipv6("fe80::1234:5678", 2)));           // link-local
  CHECK(gidUsable(ipv6("fd00::5", 2)));
  CHECK(gidUsable(ipv4("10.0.0.5", 2)));
  CHECK(gidFlid(ipv6("fe80:0:0:1234::1", 0)) == 0);
  CHECK(gidFlid(ipv6("fec0:0:12:3400::1", 0)) == 0x0012);
  const GidRule r16 = rule("", "", "10.1.0.0/16");
  CHECK(gidInRange(r16, ipv4("10.1.200.3", 2)));
  CHECK_FALSE(gidInRange(r16, ipv4("10.2.0.3", 2)));
  const GidRule r6 = rule("", "AF_INET6", "fd00:1::/32");
  CHECK(gidInRange(r6, ipv6("fd00:1:2::9", 2)));
  CHECK_FALSE(gidInRange(r6, ipv6("fd00:2::9", 2)));
}

TEST_CASE("the GID of a RoCE port follows the wanted family, range and version", "[ib_select]") {
  // A typical RoCE table: link-local v1 and v2, then an IPv4 address as v1 and v2, then a global
  // IPv6 address as v1 and v2.
  const std::vector<Gid> table = {ipv6("fe80::1", 1),  ipv6("fe80::1", 2), ipv4("10.1.0.5", 1),
                                  ipv4("10.1.0.5", 2), ipv6("fd00::5", 1), ipv6("fd00::5", 2)};
  CHECK(chooseGidIndex(table, false, rule()) == 3);                          // AF_INET, RoCE v2
  CHECK(chooseGidIndex(table, false, rule("", "", "", "1")) == 2);           // RoCE v1
  CHECK(chooseGidIndex(table, false, rule("", "AF_INET6")) == 5);            // the global IPv6 one
  CHECK(chooseGidIndex(table, false, rule("", "", "10.1.0.0/24")) == 3);     // inside the range
  CHECK(chooseGidIndex(table, false, rule("", "", "192.168.0.0/16")) == 0);  // nothing inside it
  CHECK(chooseGidIndex(table, false, rule("4")) == 4);                       // forced
  CHECK(chooseGidIndex({}, false, rule()) == 0);
  // Two IPv4 addresses: the first of the wanted version that fits the range.
  const std::vector<Gid> two = {ipv6("fe80::1", 2), ipv4("10.1.0.5", 2), ipv4("10.2.0.5", 2)};
  CHECK(chooseGidIndex(two, false, rule()) == 1);
  CHECK(chooseGidIndex(two, false, rule("", "", "10.2.0.0/16")) == 2);
}

TEST_CASE("the GID of an InfiniBand port is the routable-FLID one when it carries a FLID", "[ib_select]") {
  const std::vector<Gid> flid = {ipv6("fe80::1", 0), ipv6("fec0:0:12:3400::1", 0)};
  CHECK(chooseGidIndex(flid, true, rule()) == 1);
  const std::vector<Gid> none = {ipv6("fe80::1", 0), ipv6("fe80::2", 0)};
  CHECK(chooseGidIndex(none, true, rule()) == 0);
  CHECK(chooseGidIndex({ipv6("fe80::1", 0)}, true, rule()) == 0);  // no such index
}

TEST_CASE("wrong GID settings are errors that say what to write", "[ib_select]") {
  auto idx = parseGidRule("x", "", "", "");
  REQUIRE_FALSE(idx.isOk());
  CHECK(idx.status().message() == "the GID index 'x' is not a number from 0 to 65535");
  auto fam = parseGidRule("", "INET", "", "");
  REQUIRE_FALSE(fam.isOk());
  CHECK(fam.status().message() == "the address family 'INET' is neither AF_INET nor AF_INET6");
  auto ver = parseGidRule("", "", "", "3");
  REQUIRE_FALSE(ver.isOk());
  CHECK(ver.status().message() == "the RoCE version '3' is neither 1 nor 2");
  auto range = parseGidRule("", "", "10.1.0.0/40", "");
  REQUIRE_FALSE(range.isOk());
  CHECK(range.status().message() ==
        "the address range '10.1.0.0/40' is not address/bits in AF_INET (10.1.0.0/16) with bits from 0 to 32");
  CHECK_FALSE(parseGidRule("", "AF_INET6", "10.1.0.0/16", "").isOk());  // an IPv4 range for AF_INET6
}

TEST_CASE("RoCE versions are read from a sysfs tree and a machine without a NIC offers no port", "[ib_select]") {
  char tmpl[] = "/tmp/chorus_ibsysfs_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl;
  const std::string types = root + "/mlx5_0/ports/1/gid_attrs/types";
  REQUIRE(std::system(("mkdir -p " + types).c_str()) == 0);
  const auto put = [&](int index, const char* text) {
    FILE* f = std::fopen((types + "/" + std::to_string(index)).c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text, f);
    std::fclose(f);
  };
  put(0, "IB/RoCE v1\n");
  put(1, "RoCE v2\n");
  put(2, "\n");  // a container's unmapped index reads empty
  CHECK(roceVersion(root, "mlx5_0", 1, 0) == 1);
  CHECK(roceVersion(root, "mlx5_0", 1, 1) == 2);
  CHECK(roceVersion(root, "mlx5_0", 1, 2) == 0);
  CHECK(roceVersion(root, "mlx5_0", 1, 3) == 0);  // no such file
  CHECK(std::system(("rm -rf " + root).c_str()) == 0);

  // This machine has no RDMA device (docs/network.md): nothing is offered, and why is said.
  std::string why;
  auto hcas = parseHcaList("");
  REQUIRE(hcas.isOk());
  const std::vector<PortInfo> ports = discoverPorts(systemVerbs(), hcas.value(), rule(), &why);
  if (ports.empty()) {
    CHECK_FALSE(why.empty());
  } else {
    WARN("this machine has an active RDMA port: " << ports[0].device << ":" << ports[0].port);
  }
}
