// The transports' registry (src/transport/transport.h, makeTransports): one instance of each, in
// the order a communicator prefers them for a peer. Adding a transport is its files, its factory
// (registry.h) called here, and its sources in CMakeLists.txt.
#include <memory>
#include <vector>

#include "transports/registry.h"

namespace chorus {

std::vector<std::unique_ptr<Transport>> makeTransports(const TransportEnv& env) {
  std::vector<std::unique_ptr<Transport>> all;
  all.push_back(makeInProcTransport(env));
  all.push_back(makeCudaIpcTransport(env));
  all.push_back(makeShmTransport(env));
  all.push_back(makeNetTransport(env));
  return all;
}

}  // namespace chorus
