// Reading a launcher's environment (chorusrun, Open MPI, torchrun, Slurm) for
// chorusCommInitFromEnv; see init_env.cc for the variables.
#pragma once

#include <string>

#include "src/common/status.h"

namespace chorus {

struct EnvLaunch {
  int rank = -1;
  int nranks = -1;
  std::string rootHostPort;  // where rank 0 hosts the bootstrap root
  bool alone = false;        // no launcher: one rank, with a private root
};

Result<EnvLaunch> readLaunchEnv();
// The first host of a Slurm node list: "node[03-05,07],other" -> "node03".
std::string firstSlurmHost(const std::string& list);

}  // namespace chorus
