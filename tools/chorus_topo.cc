// chorus-topo: what Chorus sees of a machine, through hwloc.
//
//   chorus-topo            the live machine (or CHORUS_TOPO_FILE when set)
//   chorus-topo FILE.xml   the machine an hwloc XML file describes (lstopo FILE.xml writes one)
//
// Prints packages, NUMA nodes, cores, each NVIDIA GPU and NIC with its PCI locality, and the link
// class between every pair of GPUs.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "src/topo/topo.h"

int main(int argc, char** argv) {
  std::string xml;
  if (argc > 2 || (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help"))) {
    std::fprintf(stderr, "usage: chorus-topo [hwloc-xml-file]\n");
    return argc == 2 ? 0 : 2;
  }
  if (argc == 2) {
    xml = argv[1];
  } else if (const char* f = std::getenv("CHORUS_TOPO_FILE")) {
    xml = f;
  }
  auto m = chorus::topo::detect(xml);
  if (!m.isOk()) {
    std::fprintf(stderr, "chorus-topo: %s\n", m.status().message().c_str());
    return 1;
  }
  std::fputs(chorus::topo::describe(m.value()).c_str(), stdout);
  return 0;
}
