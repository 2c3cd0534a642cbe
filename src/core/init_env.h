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
  // The rank's index among the job's ranks on its host, when the launcher says (CHORUS_LOCAL_RANK,
  // OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK, SLURM_LOCALID); -1 otherwise.
  int localRank = -1;
};

Result<EnvLaunch> readLaunchEnv();
// The GPU of a rank started by a launcher: local rank modulo the devices this process sees (they
// are CUDA_VISIBLE_DEVICES's, renumbered from 0); -1 without a local rank or a device.
int deviceForLocalRank(int localRank, int visibleDevices);
// The first host of a Slurm node list: "node[03-05,07],other" -> "node03".
std::string firstSlurmHost(const std::string& list);

}  // namespace chorus
