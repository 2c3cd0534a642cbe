#include "src/core/flight.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/common/os.h"

namespace chorus {

const char* flightStateName(FlightEntry::State s) {
  switch (s) {
    case FlightEntry::State::kIssued:
      return "issued";
    case FlightEntry::State::kEnqueued:
      return "enqueued";
    case FlightEntry::State::kRunning:
      return "running";
    case FlightEntry::State::kDone:
      return "done";
    case FlightEntry::State::kFailed:
      return "failed";
    case FlightEntry::State::kCaptured:
      return "captured";
  }
  return "?";
}

uint64_t FlightRecorder::issue(const FlightEntry& e) {
  if (ring_.empty()) return 0;
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t id = next_++;
  FlightEntry& at = ring_[id % ring_.size()];
  at = e;
  at.id = id;
  return id;
}

uint64_t FlightRecorder::issueHost(const HostOp& h, bool running, int64_t now) {
  if (ring_.empty()) return 0;
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t id = next_++;
  FlightEntry& e = ring_[id % ring_.size()];
  e.id = id;
  e.seq = h.seq;
  e.coll = h.coll;
  e.algo = h.algo;
  e.proto = "";
  e.blocks = 0;
  e.count = h.count;
  e.type = h.type;
  e.op = h.op;
  e.root = h.root;
  e.state = running ? FlightEntry::State::kRunning : FlightEntry::State::kIssued;
  e.result = 0;
  e.gpu = -1;
  e.cudaStream = 0;
  e.issuedNs = now;
  e.startNs = running ? now : 0;
  e.endNs = 0;
  e.why.clear();
  return id;
}

uint64_t FlightRecorder::issueAll(const std::vector<FlightEntry>& es) {
  if (ring_.empty() || es.empty()) return 0;
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t first = next_;
  for (const FlightEntry& e : es) {
    FlightEntry& at = ring_[next_ % ring_.size()];
    at = e;
    at.id = next_++;
  }
  return first;
}

void FlightRecorder::mark(uint64_t first, uint64_t last, FlightEntry::State state, int result, int64_t now,
                          const std::string& why) {
  if (ring_.empty() || first == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  // Only ids still in the ring: the newest ring_.size() of them.
  const uint64_t oldest = next_ > ring_.size() ? next_ - ring_.size() : 1;
  for (uint64_t id = std::max(first, oldest); id <= last && id < next_; ++id) {
    FlightEntry& e = ring_[id % ring_.size()];
    if (e.id != id || e.state >= state || e.state == FlightEntry::State::kDone) continue;
    if (state == FlightEntry::State::kCaptured) {
      // Nothing ends: the graph's replays run it, untold.
    } else if (state == FlightEntry::State::kRunning) {
      e.startNs = now;
    } else {
      // A device entry's start is not known; its end is when the host saw it over.
      if (e.startNs == 0 && !e.onDevice()) e.startNs = now;
      e.endNs = now;
      e.result = result;
      if (state == FlightEntry::State::kFailed) e.why = why;
    }
    e.state = state;
  }
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::vector<FlightEntry> out;
  if (ring_.empty()) return out;
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t oldest = next_ > ring_.size() ? next_ - ring_.size() : 1;
  out.reserve(next_ - oldest);
  for (uint64_t id = oldest; id < next_; ++id) out.push_back(ring_[id % ring_.size()]);
  return out;
}

namespace {

std::string ms(int64_t ns) { return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6); }

// Where a device entry ran, and what the host knows of it: from its enqueue on, never when its
// kernels started.
std::string describeDevice(const FlightEntry& e, int64_t now) {
  std::string s = fmt::format(" on GPU {} ", e.gpu);
  s += e.cudaStream ? fmt::format("stream {:#x}", e.cudaStream) : std::string("(the communicator's own stream)");
  s += std::string(" ") + flightStateName(e.state);
  switch (e.state) {
    case FlightEntry::State::kDone:
      return s + " (seen " + ms(e.endNs - e.issuedNs) + " after enqueue)";
    case FlightEntry::State::kFailed:
      return s + fmt::format(" (seen {} after enqueue) result {}", ms(e.endNs - e.issuedNs), e.result) +
             (e.why.empty() ? "" : ": " + e.why);
    case FlightEntry::State::kCaptured:
      return s + " into a CUDA graph (its replays are not tracked)";
    default:
      return s + " for " + ms(now - e.issuedNs) + " (not seen finished)";
  }
}

std::string describe(const FlightEntry& e, int64_t now) {
  std::string s = fmt::format("#{} {}{} seq {} count {} type {}", e.id, e.onDevice() ? "device " : "", e.coll, e.seq,
                              e.count, e.type);
  if (e.op >= 0) s += fmt::format(" op {}", e.op);
  const bool p2p = std::string(e.coll) == "Send" || std::string(e.coll) == "Recv";
  if (e.root >= 0) s += fmt::format(" {} {}", p2p ? "peer" : "root", e.root);
  s += fmt::format(" algo {}", e.algo);
  if (*e.proto) s += fmt::format(" proto {}", e.proto);
  if (e.blocks > 0) s += fmt::format(" blocks {}", e.blocks);
  if (e.onDevice()) return s + describeDevice(e, now);
  s += fmt::format(" {}", flightStateName(e.state));
  switch (e.state) {
    case FlightEntry::State::kIssued:
      s += " for " + ms(now - e.issuedNs);
      break;
    case FlightEntry::State::kRunning:
      s += fmt::format(" for {} (queued {})", ms(now - e.startNs), ms(e.startNs - e.issuedNs));
      break;
    default:
      s += fmt::format(" in {} (queued {})", ms(e.endNs - e.startNs), ms(e.startNs - e.issuedNs));
      if (e.state == FlightEntry::State::kFailed) s += fmt::format(" result {}", e.result);
      if (e.state == FlightEntry::State::kFailed && !e.why.empty()) s += ": " + e.why;
      break;
  }
  return s;
}

}  // namespace

std::string FlightRecorder::text(const std::vector<FlightEntry>& entries, size_t last) {
  const int64_t now = nowNs();
  std::string s;
  const size_t from = last > 0 && entries.size() > last ? entries.size() - last : 0;
  for (size_t i = from; i < entries.size(); ++i) s += "  " + describe(entries[i], now) + "\n";
  return s;
}

std::string FlightRecorder::chromeTrace(const std::vector<FlightEntry>& entries, int rank, const std::string& thread) {
  // Chrome's trace event format: an array of events, one per line so a cut file stays readable.
  const int64_t now = nowNs();
  using Json = nlohmann::ordered_json;
  std::string s = "[\n";
  s += Json{{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}}
           .dump();
  s += ",\n" +
       Json{{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", thread}}}}.dump();
  const auto device = std::find_if(entries.begin(), entries.end(), [](const FlightEntry& e) { return e.onDevice(); });
  if (device != entries.end()) {
    s += ",\n" + Json{{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", 1},
                      {"args", {{"name", thread + " (GPU " + std::to_string(device->gpu) + ")"}}}}
                     .dump();
  }
  for (const FlightEntry& e : entries) {
    // A device span runs from the enqueue to when the host saw it over (or now); a captured one is
    // an instant.
    const int64_t start = e.startNs ? e.startNs : e.issuedNs;
    const int64_t end = e.state == FlightEntry::State::kCaptured ? start : e.endNs ? e.endNs : now;
    Json ev = {{"name", std::string(e.coll) + " #" + std::to_string(e.seq)},
               {"cat", e.algo},
               {"ph", "X"},
               {"pid", rank},
               {"tid", e.onDevice() ? 1 : 0},
               {"ts", static_cast<double>(start) / 1e3},
               {"dur", static_cast<double>(end - start) / 1e3}};
    ev["args"] = {{"id", e.id},         {"count", e.count},
                  {"type", e.type},     {"op", e.op},
                  {"root", e.root},     {"state", flightStateName(e.state)},
                  {"result", e.result}, {"queued_us", static_cast<double>(start - e.issuedNs) / 1e3}};
    if (*e.proto) ev["args"]["proto"] = e.proto;
    if (e.onDevice()) {
      ev["args"]["gpu"] = e.gpu;
      ev["args"]["stream"] = e.cudaStream ? fmt::format("{:#x}", e.cudaStream) : std::string("own");
    }
    if (!e.why.empty()) ev["args"]["why"] = e.why;
    s += ",\n" + ev.dump();
  }
  return s + "\n]\n";
}

}  // namespace chorus
