// Networks from shared libraries (docs/network.md, "Plugins").
//
// loadNetPlugin opens a library (kept loaded for the life of the process) and takes the newest
// interface it exports that Chorus knows: Chorus's own `chorusNetPlugin_v1`, else one of NCCL's,
// `ncclNetPlugin_v12` down to `ncclNetPlugin_v8`, through an adapter to chorusNet_v1_t
// (nccl_net.h has their layouts). It checks that every function a network needs is there and tries
// the network once: init, devices, and a self-test (a connection of device 0 to itself and one
// message over it, within a deadline, so a plugin whose connect hangs is found here), finalize. Every failure is an
// error that names the library, the symbol or function, and what went wrong, so the caller can say so and use sockets
// instead.
//
// The adapter gives NCCL plugins what they call: the logger (NCCL's ncclDebugLogger_t has
// chorusNetLogger_t's shape) and, from v10 on, a profiler callback that records nothing. It asks
// for no device offload (the device handle pointers it passes point at NULL), passes no profiler
// handles, and converts sizes where a version has int: a message over INT_MAX bytes to a v8 plugin
// is refused. Versions before v11 have one process-wide init: it runs once, with the first
// context's logger. Up to 4 NCCL plugins of one interface version per process.
#pragma once

#include <string>

#include "include/chorus/net.h"
#include "src/common/status.h"

namespace chorus {

struct LoadedNetwork {
  const chorusNet_v1_t* net = nullptr;
  std::string path;
  std::string symbol;    // the interface taken ("ncclNetPlugin_v11")
  bool adapted = false;  // an NCCL plugin behind the adapter
};

// `probeTimeoutNs` bounds each step of the self-test.
Result<LoadedNetwork> loadNetPlugin(const std::string& path, chorusNetLogger_t logger,
                                    int64_t probeTimeoutNs = int64_t(10) * 1000000000);

}  // namespace chorus
