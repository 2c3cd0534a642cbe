#include "src/core/flight.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/common/os.h"

namespace chorus {

const char* flightStateName(FlightEntry::State s) {
  switch (s) {
    case FlightEntry::State::kIssued:
      return "issued";
    case FlightEntry::State::kRunning:
      return "running";
    case FlightEntry::State::kDone:
      return "done";
    case FlightEntry::State::kFailed:
      return "failed";
  }
  return "?";
}

uint64_t FlightRecorder::issue(FlightEntry e) {
  if (ring_.empty()) return 0;
  std::lock_guard<std::mutex> g(mu_);
  e.id = next_++;
  ring_[e.id % ring_.size()] = e;
  return e.id;
}

void FlightRecorder::mark(uint64_t first, uint64_t last, FlightEntry::State state, int result, int64_t now) {
  if (ring_.empty() || first == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  // Only ids still in the ring: the newest ring_.size() of them.
  const uint64_t oldest = next_ > ring_.size() ? next_ - ring_.size() : 1;
  for (uint64_t id = std::max(first, oldest); id <= last && id < next_; ++id) {
    FlightEntry& e = ring_[id % ring_.size()];
    if (e.id != id || e.state >= state || e.state == FlightEntry::State::kDone) continue;
    if (state == FlightEntry::State::kRunning) {
      e.startNs = now;
    } else {
      if (e.startNs == 0) e.startNs = now;
      e.endNs = now;
      e.result = result;
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

std::string describe(const FlightEntry& e, int64_t now) {
  std::string s = fmt::format("#{} {} seq {} count {} type {}", e.id, e.coll, e.seq, e.count, e.type);
  if (e.op >= 0) s += fmt::format(" op {}", e.op);
  const bool p2p = std::string(e.coll) == "Send" || std::string(e.coll) == "Recv";
  if (e.root >= 0) s += fmt::format(" {} {}", p2p ? "peer" : "root", e.root);
  s += fmt::format(" algo {} {}", e.algo, flightStateName(e.state));
  auto ms = [](int64_t ns) { return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6); };
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
  for (const FlightEntry& e : entries) {
    const int64_t start = e.startNs ? e.startNs : e.issuedNs;
    const int64_t end = e.endNs ? e.endNs : now;
    Json ev = {{"name", std::string(e.coll) + " #" + std::to_string(e.seq)},
               {"cat", e.algo},
               {"ph", "X"},
               {"pid", rank},
               {"tid", 0},
               {"ts", static_cast<double>(start) / 1e3},
               {"dur", static_cast<double>(end - start) / 1e3}};
    ev["args"] = {{"id", e.id},         {"count", e.count},
                  {"type", e.type},     {"op", e.op},
                  {"root", e.root},     {"state", flightStateName(e.state)},
                  {"result", e.result}, {"queued_us", static_cast<double>(start - e.issuedNs) / 1e3}};
    s += ",\n" + ev.dump();
  }
  return s + "\n]\n";
}

}  // namespace chorus
