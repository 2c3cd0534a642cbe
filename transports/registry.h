// Each transport's factory (transports/registry.cc calls them, in the order a communicator
// prefers them; tests make one transport alone). The core sees none of these, only
// makeTransports (src/transport/transport.h).
#pragma once

#include <memory>

#include "src/transport/transport.h"

namespace chorus {

std::unique_ptr<Transport> makeInProcTransport(const TransportEnv& env);
std::unique_ptr<Transport> makeCudaIpcTransport(const TransportEnv& env);
std::unique_ptr<Transport> makeShmTransport(const TransportEnv& env);
std::unique_ptr<Transport> makeNetTransport(const TransportEnv& env);

}  // namespace chorus
