// chorusCommInitFromEnv's reading of each launcher's environment (no sockets).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/core/init_env.h"

using namespace chorus;

namespace {

// Sets variables for one scope and restores a clean slate after.
class Env {
 public:
  explicit Env(const std::vector<std::pair<const char*, const char*>>& vars) {
    for (const char* v : kAll) unsetenv(v);
    for (auto& [k, v] : vars) setenv(k, v, 1);
  }
  ~Env() {
    for (const char* v : kAll) unsetenv(v);
  }

 private:
  static constexpr const char* kAll[] = {"CHORUS_RANK",
                                         "CHORUS_NRANKS",
                                         "CHORUS_COMM_ID",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "RANK",
                                         "WORLD_SIZE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_STEP_NODELIST",
                                         "SLURM_JOB_NODELIST",
                                         "SLURM_JOB_ID",
                                         "SLURM_STEP_ID",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "OMPI_MCA_ess_base_jobid",
                                         "CHORUS_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "LOCAL_RANK",
                                         "SLURM_LOCALID"};
};

}  // namespace

TEST_CASE("Slurm node lists give their first host", "[env]") {
  CHECK(firstSlurmHost("node[03-05,07],other") == "node03");
  CHECK(firstSlurmHost("a,b") == "a");
  CHECK(firstSlurmHost("single") == "single");
  CHECK(firstSlurmHost("gpu[7]") == "gpu7");
  CHECK(firstSlurmHost("x1,gpu[2-3]") == "x1");
}

TEST_CASE("each launcher's variables", "[env]") {
  {
    Env e({{"CHORUS_RANK", "2"}, {"CHORUS_NRANKS", "4"}, {"CHORUS_COMM_ID", "10.0.0.1:1234"}});
    auto l = readLaunchEnv();
    REQUIRE(l.isOk());
    CHECK(l.value().rank == 2);
    CHECK(l.value().nranks == 4);
    CHECK(l.value().rootHostPort == "10.0.0.1:1234");
  }
  {
    Env e({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}});
    auto l = readLaunchEnv();
    REQUIRE(!l.isOk());
    CHECK(l.status().message().find("CHORUS_COMM_ID") != std::string::npos);
  }
  {
    // Every rank on one host: loopback, at a port from the job id.
    Env e({{"OMPI_COMM_WORLD_RANK", "1"},
           {"OMPI_COMM_WORLD_SIZE", "3"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
           {"OMPI_MCA_ess_base_jobid", "589365249"}});
    auto l = readLaunchEnv();
    REQUIRE(l.isOk());
    CHECK(l.value().rank == 1);
    CHECK(l.value().rootHostPort == "127.0.0.1:" + std::to_string(20000 + 589365249 % 20000));
  }
  {
    // Across hosts rank 0's address is unknown: CHORUS_COMM_ID is needed.
    Env e({{"OMPI_COMM_WORLD_RANK", "1"},
           {"OMPI_COMM_WORLD_SIZE", "4"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
           {"OMPI_MCA_ess_base_jobid", "589365249"}});
    auto l = readLaunchEnv();
    REQUIRE(!l.isOk());
    CHECK(l.status().message().find("CHORUS_COMM_ID") != std::string::npos);
  }
  {
    Env e({{"RANK", "0"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "head"}, {"MASTER_PORT", "29500"}});
    auto l = readLaunchEnv();
    REQUIRE(l.isOk());
    CHECK(l.value().rootHostPort == "head:29501");
  }
  {
    Env e({{"SLURM_PROCID", "5"},
           {"SLURM_NTASKS", "16"},
           {"SLURM_STEP_NODELIST", "n[10-13]"},
           {"SLURM_JOB_ID", "1000"},
           {"SLURM_STEP_ID", "2"}});
    auto l = readLaunchEnv();
    REQUIRE(l.isOk());
    CHECK(l.value().rank == 5);
    CHECK(l.value().nranks == 16);
    CHECK(l.value().rootHostPort == "n10:" + std::to_string(20000 + (1000 * 64 + 2) % 20000));
  }
  {
    Env e({{"CHORUS_RANK", "x"}, {"CHORUS_NRANKS", "4"}, {"CHORUS_COMM_ID", "h:1"}});
    auto l = readLaunchEnv();
    REQUIRE(!l.isOk());
    CHECK(l.status().message().find("CHORUS_RANK=x") != std::string::npos);
  }
  {
    // No launcher: one rank, with a root of its own.
    Env e({});
    auto l = readLaunchEnv();
    REQUIRE(l.isOk());
    CHECK(l.value().alone);
    CHECK(l.value().rank == 0);
    CHECK(l.value().nranks == 1);
  }
}

TEST_CASE("each launcher's local rank, and the GPU it picks", "[env]") {
  struct Case {
    std::vector<std::pair<const char*, const char*>> vars;
    int localRank;
  };
  // Every launcher's own variable; another launcher's is not read.
  const Case cases[] = {
      {{{"CHORUS_RANK", "5"},
        {"CHORUS_NRANKS", "8"},
        {"CHORUS_COMM_ID", "h:1"},
        {"CHORUS_LOCAL_RANK", "1"},
        {"LOCAL_RANK", "3"}},
       1},
      {{{"OMPI_COMM_WORLD_RANK", "6"},
        {"OMPI_COMM_WORLD_SIZE", "8"},
        {"CHORUS_COMM_ID", "h:1"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}},
       2},
      {{{"RANK", "7"},
        {"WORLD_SIZE", "8"},
        {"MASTER_ADDR", "h"},
        {"MASTER_PORT", "1"},
        {"LOCAL_RANK", "3"},
        {"SLURM_PROCID", "0"},
        {"SLURM_LOCALID", "0"}},
       3},
      {{{"SLURM_PROCID", "4"},
        {"SLURM_NTASKS", "8"},
        {"SLURM_JOB_NODELIST", "a"},
        {"SLURM_JOB_ID", "1"},
        {"SLURM_LOCALID", "0"}},
       0},
      {{{"CHORUS_RANK", "5"}, {"CHORUS_NRANKS", "8"}, {"CHORUS_COMM_ID", "h:1"}}, -1},  // none given
  };
  for (const Case& c : cases) {
    Env e(c.vars);
    auto l = readLaunchEnv();
    REQUIRE(l.isOk());
    CHECK(l.value().localRank == c.localRank);
  }
  {
    Env e({{"CHORUS_RANK", "5"}, {"CHORUS_NRANKS", "8"}, {"CHORUS_COMM_ID", "h:1"}, {"CHORUS_LOCAL_RANK", "-1"}});
    auto l = readLaunchEnv();
    REQUIRE_FALSE(l.isOk());
    CHECK(l.status().message().find("CHORUS_LOCAL_RANK") != std::string::npos);
  }
  // Local rank modulo the devices this process sees (CUDA_VISIBLE_DEVICES's, renumbered).
  CHECK(deviceForLocalRank(0, 4) == 0);
  CHECK(deviceForLocalRank(3, 4) == 3);
  CHECK(deviceForLocalRank(5, 4) == 1);
  CHECK(deviceForLocalRank(1, 1) == 0);  // every local rank on the one GPU
  CHECK(deviceForLocalRank(2, 0) == -1);
  CHECK(deviceForLocalRank(-1, 4) == -1);
}
