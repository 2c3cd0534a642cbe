// chorus-topo: what Chorus sees of a machine, through hwloc, and the rings and trees it builds.
//
//   chorus-topo [FILE.xml]                          the live machine (or CHORUS_TOPO_FILE when set)
//   chorus-topo --layout 4x8 [--channels N] [FILE.xml]
//                                                   a job of 4 such hosts with 8 ranks each ("2,1":
//                                                   uneven hosts): where each rank runs, the rings
//                                                   (channels) with their slowest hop and NICs, and
//                                                   the double binary trees
//
// Prints packages, NUMA nodes, cores, each NVIDIA GPU and NIC with its PCI locality and link
// speed, and the link class and bandwidth between every pair of GPUs (NVLink direct or through
// NVSwitches, else PCIe). Ranks are placed as the runtime places them: GPU = local rank
// mod GPUs; without GPUs, unbound CPU ranks spread over the NUMA nodes in blocks.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/algo/tuner.h"
#include "src/topo/topo.h"

namespace {

using namespace chorus::topo;

// "4x8" -> 8,8,8,8; "2,1" -> 2,1. Empty on a malformed layout.
std::vector<int> parseLayout(const std::string& s) {
  std::vector<int> perHost;
  auto num = [](const std::string& t) {
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) return -1;
    const int v = std::atoi(t.c_str());
    return v > 0 ? v : -1;
  };
  const size_t x = s.find('x');
  if (x != std::string::npos) {
    const int hosts = num(s.substr(0, x));
    const int ranks = num(s.substr(x + 1));
    if (hosts < 0 || ranks < 0 || hosts > 4096) return {};
    return std::vector<int>(static_cast<size_t>(hosts), ranks);
  }
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const int v = num(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (v < 0) return {};
    perHost.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return perHost;
}

std::string nicName(const Machine& m, int nic) {
  if (nic < 0) return "-";
  const Device& d = m.nics[nic];
  return d.names.empty() ? d.busId : d.names.front();
}

void printLayout(const Machine& m, const std::vector<int>& perHost, int nChannels) {
  std::vector<RankPlace> ranks;
  std::vector<Machine> hosts(perHost.size(), m);
  for (size_t h = 0; h < perHost.size(); ++h) {
    for (int l = 0; l < perHost[h]; ++l) {
      RankPlace p = placeRank(m, l, perHost[h], -1);
      p.host = static_cast<int>(h);
      ranks.push_back(p);
    }
  }
  std::printf("\nlayout: %zu host(s), %zu rank(s)\n", perHost.size(), ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankPlace& p = ranks[r];
    if (p.gpu >= 0) {
      std::printf("rank %zu: host %d GPU %d (%s, NUMA node %d), nearest NIC %s\n", r, p.host, p.gpu,
                  m.gpus[p.gpu].busId.c_str(), p.numa, nicName(m, nearestNic(m, p)).c_str());
    } else {
      std::printf("rank %zu: host %d CPU, NUMA node %d, nearest NIC %s\n", r, p.host, p.numa,
                  nicName(m, nearestNic(m, p)).c_str());
    }
  }
  const auto plans = buildChannels(ranks, hosts, nChannels);
  for (size_t c = 0; c < plans.size(); ++c) {
    const ChannelPlan& p = plans[c];
    std::printf("Channel %02zu :", c);
    for (int r : p.ring) std::printf(" %d", r);
    std::printf("\n  slowest hop: %s, ~%g GB/s, ~%g us a hop\n", p.bottleneck.c_str(), p.busBwGBs, p.hopLatencyUs);
    std::string nics;
    for (size_t r = 0; r < p.nicOfRank.size(); ++r) {
      if (p.nicOfRank[r] >= 0) nics += " rank " + std::to_string(r) + ":" + nicName(m, p.nicOfRank[r]);
    }
    if (!nics.empty()) std::printf("  host crossings through NICs:%s\n", nics.c_str());
  }
  const DoubleTree t = buildRankTrees(ranks, plans.empty() ? std::vector<int>() : plans[0].ring);
  for (int k = 0; k < 2; ++k) {
    std::printf("Tree %d : root %d, parent of each rank:", k, t.root[k]);
    for (int p : t.parent[k]) std::printf(" %d", p);
    std::printf("\n");
  }
  if (plans.empty() || ranks.size() < 2) return;
  const chorus::AllReduceModel model = allReduceModel(ranks, plans[0], t);
  std::printf("Tuner (all-reduce, estimates): ring latency %.0f us, tree latency %.0f us, %g GB/s\n",
              model.ringLatencyUs, model.treeLatencyUs, model.bwGBs);
  // What a job of processes in this layout would choose, with the default settings and this
  // build's tuning table (docs/topology.md, "The tuner").
  chorus::TunerFacts facts;
  facts.nranks = static_cast<int>(ranks.size());
  facts.singleHost = perHost.size() == 1;
  facts.model = model;
  std::printf("Tuner (host all-reduce, ranks as processes): %s\n",
              chorus::Tuner(facts).describeHostAllReduce().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string xml;
  std::string layout;
  int channels = 2;
  CLI::App app{"chorus-topo: what Chorus sees of a machine (hwloc), and the rings and trees it builds"};
  app.add_option("file", xml, "an hwloc XML file (default: CHORUS_TOPO_FILE when set, else the live machine)");
  app.add_option("--layout", layout, "a job of HOSTSxRANKS (4x8) or ranks per host (2,1): placement, rings, trees");
  app.add_option("--channels", channels, "rings to build with --layout")->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);
  std::string origin = "the argument FILE";
  if (xml.empty()) {
    if (const char* f = std::getenv("CHORUS_TOPO_FILE")) xml = f;
    origin = "CHORUS_TOPO_FILE";
  }
  std::vector<int> perHost;
  if (!layout.empty()) {
    perHost = parseLayout(layout);
    if (perHost.empty()) {
      std::fprintf(stderr, "chorus-topo: --layout takes HOSTSxRANKS (4x8) or ranks per host (2,1), not '%s'\n",
                   layout.c_str());
      return 2;
    }
  }
  auto m = detect(xml, origin);
  if (!m.isOk()) {
    std::fprintf(stderr, "chorus-topo: %s\n", m.status().message().c_str());
    return 1;
  }
  std::fputs(describe(m.value()).c_str(), stdout);
  if (!perHost.empty()) printLayout(m.value(), perHost, channels);
  return 0;
}
