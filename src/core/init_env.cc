// chorusCommInitFromEnv: a communicator from the environment of the launcher that started us.
//
// Recognised, in this order:
//   chorusrun:  CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID
//   Open MPI:   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE; the root is CHORUS_COMM_ID, or, when
//               every rank is on one host (OMPI_COMM_WORLD_LOCAL_SIZE), 127.0.0.1 at port
//               20000 + OMPI_MCA_ess_base_jobid % 20000
//   torchrun:   RANK, WORLD_SIZE, MASTER_ADDR; the root listens on CHORUS_COMM_ID if set, else on
//               MASTER_ADDR at port MASTER_PORT + 1 (MASTER_PORT is PyTorch's store)
//   Slurm:      SLURM_PROCID, SLURM_NTASKS; the root is the first host of SLURM_STEP_NODELIST
//               (or SLURM_JOB_NODELIST) at port 20000 + (SLURM_JOB_ID * 64 + SLURM_STEP_ID) % 20000,
//               unless CHORUS_COMM_ID is set
//   none:       one rank, with a root of its own (CHORUS_COMM_ID is not used)
// and the rank's local rank from the same launcher (CHORUS_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK,
// LOCAL_RANK, SLURM_LOCALID), which picks its GPU (deviceForLocalRank).
#include "src/core/init_env.h"

#include <cstdint>
#include <cstdlib>

#include "src/bootstrap/bootstrap.h"
#include "src/common/config.h"
#include "src/common/settings.h"

namespace chorus {
namespace {

// What chorusrun sets for each rank (and reads: CHORUS_RSH); other launchers' variables are theirs.
const TextSetting kRankVar{"CHORUS_RANK", SettingScope::kLaunch, "this process's rank (chorusrun)"};
const TextSetting kNRanksVar{"CHORUS_NRANKS", SettingScope::kLaunch, "the job size (chorusrun)"};
const TextSetting kLocalRankVar{"CHORUS_LOCAL_RANK", SettingScope::kLaunch,
                                "its rank among the ranks of its host (chorusrun); picks the GPU"};
const TextSetting kLocalSizeVar{"CHORUS_LOCAL_SIZE", SettingScope::kLaunch, "the ranks of its host (chorusrun)"};
const TextSetting kRshVar{"CHORUS_RSH", SettingScope::kLaunch, "how chorusrun starts a rank on another host"};

Result<int> envInt(const char* name) {
  if (!envValue(name)) return invalidArgument(std::string(name) + " is not set");
  int64_t x = 0;
  CHORUS_TRY(readEnvInt(name, 0, int64_t(1) << 30, &x));
  return static_cast<int>(x);
}

}  // namespace

// "node[03-05,07],other" -> "node03"; "a,b" -> "a".
std::string firstSlurmHost(const std::string& list) {
  size_t bracket = list.find('[');
  size_t comma = list.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return list.substr(0, comma);
  }
  std::string prefix = list.substr(0, bracket);
  size_t end = list.find_first_of("-,]", bracket + 1);
  return prefix + list.substr(bracket + 1, end - bracket - 1);
}

int deviceForLocalRank(int localRank, int visibleDevices) {
  if (localRank < 0 || visibleDevices <= 0) return -1;
  return localRank % visibleDevices;
}

namespace {

Result<EnvLaunch> readLaunchRanks() {
  EnvLaunch l;
  const char* commId = envValue(kCommIdSetting.name());
  if (envValue(kRankVar.name()) || envValue(kNRanksVar.name())) {
    CHORUS_ASSIGN_OR_RETURN(l.rank, envInt(kRankVar.name()));
    CHORUS_ASSIGN_OR_RETURN(l.nranks, envInt(kNRanksVar.name()));
    if (!commId) return invalidArgument("CHORUS_RANK is set but CHORUS_COMM_ID (host:port of rank 0's root) is not");
    l.rootHostPort = commId;
    return l;
  }
  if (envValue("OMPI_COMM_WORLD_RANK")) {
    CHORUS_ASSIGN_OR_RETURN(l.rank, envInt("OMPI_COMM_WORLD_RANK"));
    CHORUS_ASSIGN_OR_RETURN(l.nranks, envInt("OMPI_COMM_WORLD_SIZE"));
    if (commId) {
      l.rootHostPort = commId;
      return l;
    }
    // Every rank on one host: the root listens on loopback at a port derived from the job id,
    // which every rank of the job reads the same. Across hosts rank 0's address is not known.
    const char* local = envValue("OMPI_COMM_WORLD_LOCAL_SIZE");
    const char* job = envValue("OMPI_MCA_ess_base_jobid");
    if (local && job && std::string(local) == std::to_string(l.nranks)) {
      int64_t id = 0;
      CHORUS_TRY(readEnvInt("OMPI_MCA_ess_base_jobid", 0, INT64_MAX, &id));
      l.rootHostPort = "127.0.0.1:" + std::to_string(20000 + id % 20000);
      return l;
    }
    return invalidArgument(
        "under mpirun across hosts, set CHORUS_COMM_ID=host:port (rank 0's host, a free port), e.g. "
        "mpirun -x CHORUS_COMM_ID=$(hostname):29600 ...");
  }
  if (envValue("RANK") && envValue("WORLD_SIZE")) {
    CHORUS_ASSIGN_OR_RETURN(l.rank, envInt("RANK"));
    CHORUS_ASSIGN_OR_RETURN(l.nranks, envInt("WORLD_SIZE"));
    if (commId) {
      l.rootHostPort = commId;
      return l;
    }
    const char* addr = envValue("MASTER_ADDR");
    if (!addr) return invalidArgument("RANK and WORLD_SIZE are set but MASTER_ADDR is not (and no CHORUS_COMM_ID)");
    CHORUS_ASSIGN_OR_RETURN(int port, envInt("MASTER_PORT"));
    l.rootHostPort = std::string(addr) + ":" + std::to_string(port + 1);
    return l;
  }
  if (envValue("SLURM_PROCID")) {
    CHORUS_ASSIGN_OR_RETURN(l.rank, envInt("SLURM_PROCID"));
    CHORUS_ASSIGN_OR_RETURN(l.nranks, envInt("SLURM_NTASKS"));
    if (commId) {
      l.rootHostPort = commId;
      return l;
    }
    const char* nodes = envValue("SLURM_STEP_NODELIST");
    if (!nodes) nodes = envValue("SLURM_JOB_NODELIST");
    if (!nodes) return invalidArgument("SLURM_PROCID is set but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is");
    CHORUS_ASSIGN_OR_RETURN(int job, envInt("SLURM_JOB_ID"));
    int step = 0;
    if (envValue("SLURM_STEP_ID")) {
      CHORUS_ASSIGN_OR_RETURN(step, envInt("SLURM_STEP_ID"));
    }
    const int port = 20000 + static_cast<int>((static_cast<int64_t>(job) * 64 + step) % 20000);
    l.rootHostPort = firstSlurmHost(nodes) + ":" + std::to_string(port);
    return l;
  }
  // No launcher: a job of one rank, as mpirun's singleton init (a program started by hand runs).
  l.rank = 0;
  l.nranks = 1;
  l.alone = true;
  return l;
}

}  // namespace

Result<EnvLaunch> readLaunchEnv() {
  CHORUS_ASSIGN_OR_RETURN(EnvLaunch l, readLaunchRanks());
  if (l.alone) return l;
  // The local rank of the launcher that gave the rank.
  const char* name = "SLURM_LOCALID";
  if (envValue(kRankVar.name()) || envValue(kNRanksVar.name())) {
    name = kLocalRankVar.name();
  } else if (envValue("OMPI_COMM_WORLD_RANK")) {
    name = "OMPI_COMM_WORLD_LOCAL_RANK";
  } else if (envValue("RANK") && envValue("WORLD_SIZE")) {
    name = "LOCAL_RANK";  // torchrun
  }
  if (envValue(name)) {
    CHORUS_ASSIGN_OR_RETURN(l.localRank, envInt(name));
  }
  return l;
}

}  // namespace chorus
