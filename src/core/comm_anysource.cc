// chorusRecvAny's first half (HostPath::firstSender): which rank sent first.
//
// A receive from any source cannot be planned like a receive from one peer: the peer is known
// only once its data waits. This looks, turn by turn, at every peer: one already connected for
// point-to-point has sent when its FIFO holds a slot; one not yet connected asks to connect when
// its first send to this rank starts, and that request waits in the bootstrap mailbox. Such a
// request is answered here by connecting both ways, as a receive from that peer would; its data
// then comes on the new FIFO. The scan starts after the peer chosen last, so a peer that keeps
// sending does not starve the others. The receive itself is then an ordinary chorusRecv from
// the chosen rank (src/api/api.cc), which keeps the per-pair order and sequence numbers.
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/core/comm.h"
#include "src/core/host_path.h"

namespace chorus {

Result<int> HostPath::firstSender() {
  const Config& config = comm_.config();
  const int rank = comm_.rank();
  const int nranks = comm_.nranks();
  const uint64_t connectTag = makeTag(TagSpace::kConnect, connTag(ConnFamily::kP2p, 0));
  const int64_t start = nowNs();
  const int64_t deadline = start + config.timeoutNs;
  int64_t nextWarn = start + config.stallWarnNs();
  int64_t pauseNs = 0;
  while (true) {
    if (comm_.health_.failed()) {
      Status broken = comm_.health_.asyncError();
      return Status(broken.code(), "the communicator failed earlier: " + broken.message());
    }
    if (comm_.health_.aborted()) return remoteError("the communicator was aborted");
    const int first = anyNext_.load(std::memory_order_relaxed);
    for (int k = 0; k < nranks; ++k) {
      const int p = (first + k) % nranks;
      if (p == rank) continue;
      if (const RecvCursor* rc = conns_.recv(ConnFamily::kP2p, p)) {
        if (rc->fifo.hasData(rc->head)) {
          anyNext_.store((p + 1) % nranks, std::memory_order_relaxed);
          return p;
        }
      } else if (comm_.bootstrap().pending(p, connectTag)) {
        std::vector<std::pair<Communicator*, std::vector<ConnKey>>> work;
        work.emplace_back(&comm_, std::vector<ConnKey>{ConnKey{ConnFamily::kP2p, p, p, true},
                                                       ConnKey{ConnFamily::kP2p, p, p, false}});
        Status s = Communicator::connect(work);
        if (!s.isOk()) {
          comm_.health_.setAsyncError(s);
          return s;
        }
        pauseNs = 0;
      }
    }
    const int64_t now = nowNs();
    if (now >= deadline) {
      return Status(chorusSystemError,
                    "chorusRecvAny: no rank sent to rank " + std::to_string(rank) + " within the timeout (" +
                        std::to_string(config.timeoutNs / 1000000000) +
                        " s, CHORUS_TIMEOUT or config.timeoutSeconds); a receive from any source waits for a "
                        "chorusSend to this rank from another rank");
    }
    if (nextWarn > start && now >= nextWarn) {
      comm_.log().warn(kSubsysP2p, "chorusRecvAny on rank {} has waited {:.1f} s and no rank has sent to it yet", rank,
                       static_cast<double>(now - start) / 1e9);
      nextWarn = now + 2 * (now - start);
    }
    // Looks again at once (a send often follows at once), then after 2 us, doubling up to 1 ms.
    if (pauseNs > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(pauseNs));
    pauseNs = pauseNs == 0 ? 2000 : std::min<int64_t>(pauseNs * 2, 1000000);
  }
}

}  // namespace chorus
