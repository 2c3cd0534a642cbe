// The communicator's topology: every rank describes its machine (hwloc, or CHORUS_TOPO_FILE) and
// where it runs; the descriptions are allgathered, and every rank builds the same rings (one per
// channel) and double binary trees from them with the pure functions of src/topo.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/bootstrap/bootstrap.h"
#include "src/common/os.h"
#include "src/core/comm.h"

namespace chorus {
namespace {

const IntSetting kDirectMaxBytes{"CHORUS_DIRECT_MAX_BYTES",
                                 64 * 1024,
                                 0,
                                 int64_t(1) << 40,
                                 SettingScope::kPlan,
                                 "the most a rank may send in a direct all-reduce (the tuner's cap)"};
const TextSetting kTopoFile{"CHORUS_TOPO_FILE", SettingScope::kRank,
                            "a file describing this rank's machine in place of the live one"};
const TextSetting kTopoDumpFile{"CHORUS_TOPO_DUMP_FILE", SettingScope::kRank, "rank 0 writes the topology here"};

// A machine with hundreds of GPUs and NICs describes itself in tens of KiB.
constexpr uint32_t kMaxMachineBytes = 1u << 20;

// NCCL's tree line: "child/child/child->rank->parent" (-1 for none).
std::string treeLine(const topo::DoubleTree& t, int k, int rank) {
  std::vector<int> children;
  for (size_t r = 0; r < t.parent[k].size(); ++r) {
    if (t.parent[k][r] == rank) children.push_back(static_cast<int>(r));
  }
  while (children.size() < 3) children.push_back(-1);
  return std::to_string(children[0]) + "/" + std::to_string(children[1]) + "/" + std::to_string(children[2]) + "->" +
         std::to_string(rank) + "->" + std::to_string(t.parent[k][rank]);
}

// CHORUS_TOPO_DUMP_FILE: what rank 0 found and built, as JSON (docs/topology.md).
Status writeTopology(const Communicator& comm, const std::vector<topo::Machine>& hosts,
                     const std::vector<topo::RankPlace>& places, const std::vector<int>& localRank,
                     const std::vector<topo::ChannelPlan>& channels, const topo::DoubleTree& trees) {
  const int nranks = comm.nranks();
  const std::string path = kTopoDumpFile.get(comm.config().env);
  using Json = nlohmann::ordered_json;
  Json dump;
  dump["nranks"] = nranks;
  dump["hosts"] = Json::array();
  for (size_t h = 0; h < hosts.size(); ++h) {
    const topo::Machine& m = hosts[h];
    std::vector<int> ranks;
    for (int r = 0; r < nranks; ++r) {
      if (places[r].host == static_cast<int>(h)) ranks.push_back(r);
    }
    std::vector<std::string> gpus;
    for (const auto& g : m.gpus) gpus.push_back(g.busId);
    std::vector<std::string> nics;
    for (const auto& n : m.nics) nics.push_back(n.names.empty() ? n.busId : n.names.front());
    // "machine" is the description CHORUS_TOPO_FILE reads back (topo::serialize's text).
    dump["hosts"].push_back({{"name", comm.peers()[ranks.front()].host},
                             {"ranks", ranks},
                             {"packages", m.packages},
                             {"numaNodes", m.numaNodes},
                             {"cores", m.cores},
                             {"pus", m.pus},
                             {"caches", m.caches},
                             {"cacheBytes", m.cacheBytes},
                             {"gpus", gpus},
                             {"nics", nics},
                             {"machine", topo::serialize(m)}});
  }
  dump["ranks"] = Json::array();
  for (int r = 0; r < nranks; ++r) {
    const topo::RankPlace& p = places[r];
    dump["ranks"].push_back({{"rank", r},
                             {"host", p.host},
                             {"localRank", localRank[r]},
                             {"gpu", p.gpu},
                             {"numa", p.numa},
                             {"nearestNic", topo::nearestNic(hosts[p.host], p)}});
  }
  dump["channels"] = Json::array();
  for (const auto& ch : channels) {
    dump["channels"].push_back({{"ring", ch.ring},
                                {"bottleneck", ch.bottleneck},
                                {"busBwGBs", ch.busBwGBs},
                                {"hopLatencyUs", ch.hopLatencyUs},
                                {"nicOfRank", ch.nicOfRank}});
  }
  dump["trees"] = Json::array();
  for (int k = 0; k < 2; ++k) dump["trees"].push_back({{"root", trees.root[k]}, {"parent", trees.parent[k]}});
  const AllReduceModel& m = comm.tuner().model();
  dump["tuner"] = {{"ringLatencyUs", m.ringLatencyUs},
                   {"treeLatencyUs", m.treeLatencyUs},
                   {"bwGBs", m.bwGBs},
                   {"deviceChannels", comm.devicePath().channels()}};
  // Where each host all-reduce algorithm the tuner chooses stops (allReduceDirectMaxBytes, ...; 0
  // where it never runs), but the one that runs the largest sizes.
  const std::vector<Tuner::Segment>& segments = comm.tuner().hostSegments();
  for (int i = 0; i < algorithmCount(); ++i) {
    const Algo a = static_cast<Algo>(i);
    const Algorithm& algo = algorithm(a);
    if ((!segments.empty() && segments.back().choice.algo == a) || !algo.runs(CollType::kAllReduce) ||
        !algo.runsOn(MemKind::kHost) || algo.taken() != Algorithm::Taken::kChosen) {
      continue;
    }
    std::string name = algo.name();
    name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
    dump["tuner"]["allReduce" + name + "MaxBytes"] = comm.tuner().lastBytesOf(a);
  }
  makePrivateFile(path);
  std::ofstream f(path);
  f << dump.dump(2) << "\n";
  if (!f) return systemError("cannot write CHORUS_TOPO_DUMP_FILE " + path + ": check the path");
  comm.log().info(kSubsysInit, "topology written to {}", path);
  return Status::ok();
}

}  // namespace

Status Communicator::detectMachine(std::string* description, topo::TopoRecord* record) {
  // A CHORUS_TOPO_FILE that cannot be read is an error; a live machine hwloc cannot describe is
  // not (the rings then follow rank order).
  topo::Machine machine;
  auto detected = topo::detectCached(kTopoFile.get(config_.env));
  if (detected.isOk()) {
    machine = std::move(detected).value();
  } else if (!kTopoFile.get(config_.env).empty()) {
    return detected.status();
  } else {
    log_.warn(kSubsysInit, "topology detection failed ({}); rings follow rank order", detected.status().message());
  }
  *description = topo::serialize(machine);
  record->boundNuma = topo::boundNuma(machine);
  record->machineBytes = static_cast<uint32_t>(description->size());
  return Status::ok();
}

Status Communicator::buildTopology(const std::string& mine, const std::vector<topo::TopoRecord>& records) {
  size_t width = 1;
  for (int r = 0; r < nranks_; ++r) {
    if (records[r].machineBytes > kMaxMachineBytes) {
      return invalidUsage("rank " + std::to_string(r) + " describes its machine in " +
                          std::to_string(records[r].machineBytes) + " bytes, more than the " +
                          std::to_string(kMaxMachineBytes) + " any machine needs: are all ranks the same Chorus?");
    }
    width = std::max<size_t>(width, records[r].machineBytes);
  }
  std::vector<char> blobs(width * static_cast<size_t>(nranks_), 0);
  std::copy(mine.begin(), mine.end(), blobs.begin() + static_cast<std::ptrdiff_t>(width * rank_));
  CHORUS_TRY(bootstrap_->allGather(blobs.data(), width));

  // Hosts in the order of their lowest rank; a host is described by its lowest rank's record.
  std::vector<int> hostOf(nranks_, -1);
  std::vector<int> localRank(nranks_, 0);
  std::vector<int> firstRank;
  std::vector<int> localSize;
  for (int r = 0; r < nranks_; ++r) {
    for (size_t h = 0; h < firstRank.size(); ++h) {
      if (peers_[firstRank[h]].hostHash == peers_[r].hostHash) hostOf[r] = static_cast<int>(h);
    }
    if (hostOf[r] < 0) {
      hostOf[r] = static_cast<int>(firstRank.size());
      firstRank.push_back(r);
      localSize.push_back(0);
    }
    localRank[r] = localSize[hostOf[r]]++;
  }
  std::vector<topo::Machine> hosts;
  for (int first : firstRank) {
    const char* b = blobs.data() + width * static_cast<size_t>(first);
    auto m = topo::parseMachine(std::string(b, records[first].machineBytes));
    if (!m.isOk()) return internalError("rank " + std::to_string(first) + " sent " + m.status().message());
    hosts.push_back(std::move(m).value());
  }
  std::vector<topo::RankPlace> places(nranks_);
  for (int r = 0; r < nranks_; ++r) {
    const int h = hostOf[r];
    places[r] = topo::placeRank(hosts[h], localRank[r], localSize[h], records[r].boundNuma);
    places[r].host = h;
  }

  // Rings for the host path's channels and the device path's, whichever is more.
  channels_ = topo::buildChannels(places, hosts, std::max(config_.nChannels, device_.channels()));
  rings_.clear();
  ringPos_.clear();
  for (const auto& ch : channels_) {
    rings_.push_back(ch.ring);
    ringPos_.push_back(static_cast<int>(std::find(ch.ring.begin(), ch.ring.end(), rank_) - ch.ring.begin()));
  }
  trees_ = topo::buildRankTrees(places, rings_[0]);
  TunerFacts facts;
  facts.nranks = nranks_;
  facts.singleHost = singleHost_;
  facts.oneProcess = oneProcess_;
  facts.directMaxBytesSetting = static_cast<size_t>(kDirectMaxBytes.get(config_.env));
  facts.forced = forcedAlgo_;
  facts.forcedProto = forcedProto_;
  // Device connections cross a socket (host-staged, Simple only) between hosts, and wherever a
  // rank disabled shared memory; every rank knows both alike.
  facts.deviceLL = singleHost_;
  for (const PeerInfo& p : peers_) facts.deviceLL = facts.deviceLL && !(p.flags & PeerInfo::kShmDisabled);
  // LL128 needs FIFOs in GPU memory written and read by that GPU's own SMs: every rank on one GPU,
  // with its device connections in process (inproc) or through CUDA IPC, never a host-staged
  // FIFO (a 128-byte store over PCIe may arrive in parts). Between GPUs it waits for a GPU
  // run to check NVLink (docs/GPU.md).
  bool staged = false;
  for (const PeerInfo& p : peers_) staged = staged || (p.flags & PeerInfo::kP2pDisabled);
  facts.deviceLL128Safe = facts.deviceLL && device_.oneGpu() && !staged;
  facts.deviceLL128 = facts.deviceLL128Safe && config_.ll128;
  facts.deviceChannels = device_.channels();
  facts.oneCopy = config_.oneCopy < 0    ? OneCopyMode::kByTable
                  : config_.oneCopy == 0 ? OneCopyMode::kNever
                                         : OneCopyMode::kAlways;
  facts.model = topo::allReduceModel(places, channels_[0], trees_);
  tuner_ = Tuner(facts);

  if (log_.enabled(LogLevel::kInfo, kSubsysInit)) {
    const topo::RankPlace& me = places[rank_];
    log_.info(kSubsysInit, "topology: host {} of {} ({}), local rank {} of {}, {}{}", hostOf[rank_], hosts.size(),
              peers_[rank_].host, localRank[rank_], localSize[hostOf[rank_]],
              me.gpu >= 0 ? "GPU " + std::to_string(me.gpu) + " " + hosts[me.host].gpus[me.gpu].busId : "CPU",
              me.numa < 0                     ? ""
              : hosts[me.host].numaNodes == 1 ? ", NUMA node 0 (the only one)"
              : me.gpu >= 0                   ? ", NUMA node " + std::to_string(me.numa) + " (the GPU's)"
              : records[rank_].boundNuma >= 0 ? ", NUMA node " + std::to_string(me.numa) + " (bound)"
                                              : ", NUMA node " + std::to_string(me.numa) + " (unbound: spread)");
    for (size_t c = 0; c < channels_.size(); ++c) {
      std::string line;
      for (int r : channels_[c].ring) line += " " + std::to_string(r);
      log_.info(kSubsysInit, "Channel {:02d}/{:02d} :{}  (slowest hop: {}, ~{} GB/s, ~{} us)", c, channels_.size(),
                line, channels_[c].bottleneck, channels_[c].busBwGBs, channels_[c].hopLatencyUs);
    }
    log_.info(kSubsysInit, "Trees [0] {} [1] {}", treeLine(trees_, 0, rank_), treeLine(trees_, 1, rank_));
    const AllReduceModel& m = tuner_.model();
    if (tuner_.forced()) {
      log_.info(kSubsysInit, "Tuner: all-reduce runs {} at every size (CHORUS_ALGO)", algoName(*tuner_.forced()));
    } else {
      log_.info(kSubsysInit,
                "Tuner: host all-reduce {} (the tuning table over the topology's latency: ring {:.0f} us, tree {:.0f} "
                "us; {} GB/s)",
                tuner_.describeHostAllReduce(), m.ringLatencyUs, m.treeLatencyUs, m.bwGBs);
    }
    if (device_.cudaDevice() >= 0) {
      log_.info(kSubsysInit, "Tuner: device collectives run up to {} channels ({}), fewer below {} B a channel",
                device_.channels(),
                config_.deviceChannels > 0 ? "half of each GPU's multiprocessors shared by the ranks on it, at most "
                                             "CHORUS_DEVICE_NCHANNELS"
                                           : "half of each GPU's multiprocessors, shared by the ranks on it",
                Tuner::kSimpleChannelBytes);
    }
  }
  if (rank_ == 0 && !kTopoDumpFile.get(config_.env).empty())
    CHORUS_TRY(writeTopology(*this, hosts, places, localRank, channels_, trees_));
  return Status::ok();
}

}  // namespace chorus
