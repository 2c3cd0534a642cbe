// The correctness grid with one rank per process: launched by chorusrun (chorusCommInitFromEnv)
// or, built with CHORUS_GRID_MPI, by mpirun (rank 0's unique id travels by MPI_Bcast).
//
//   CHORUS_GRID=pairwise (default) | full | two-types
//
// Each rank checks its own results against the reference; ranks then compare result hashes so a
// collective that gives every rank the same data must give them the same bits. Prints one line per
// failure and ends with "N passed, M failed"; exits non-zero on any failure.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/grid/grid.h"

#ifdef CHORUS_GRID_MPI
#include <mpi.h>
#endif

using namespace chorus::test;

int main(int argc, char** argv) {
  chorusComm_t comm = nullptr;
#ifdef CHORUS_GRID_MPI
  MPI_Init(&argc, &argv);
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  chorusUniqueId id;
  if (rank == 0 && chorusGetUniqueId(&id) != chorusSuccess) {
    std::fprintf(stderr, "chorusGetUniqueId: %s\n", chorusGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (chorusCommInitRank(&comm, n, id, rank) != chorusSuccess) {
    std::fprintf(stderr, "rank %d: chorusCommInitRank: %s\n", rank, chorusGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
#else
  (void)argc;
  (void)argv;
  if (chorusCommInitFromEnv(&comm, nullptr) != chorusSuccess) {
    std::fprintf(stderr, "chorusCommInitFromEnv: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  int n = 1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
#endif
  GridOptions opts;
  const char* mode = std::getenv("CHORUS_GRID");
  std::string m = mode ? mode : "pairwise";
  if (m == "pairwise") {
    opts.full = false;
  } else if (m == "two-types") {
    opts.full = false;
    opts.large = false;
    opts.types = {chorusFloat32, chorusBfloat16};
  } else if (m != "full") {
    std::fprintf(stderr, "CHORUS_GRID=%s is not one of pairwise, full, two-types\n", m.c_str());
    return 2;
  }
  const std::vector<Case> cases = makeGrid(n, opts);
  std::vector<uint64_t> hashes(cases.size());
  int passed = 0;
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseResult r = runCase(comm, cases[i]);
    hashes[i] = r.resultHash;
    if (r.ok) {
      ++passed;
    } else {
      ++failed;
      std::fprintf(stderr, "FAIL %s\n", r.error.c_str());
      if (r.error.find("call failed") != std::string::npos) break;  // the communicator is unusable now
    }
  }
  // Ranks compare the hashes of results that must be identical everywhere.
  std::vector<uint64_t> all(hashes.size() * n);
  if (failed == 0) {
    if (chorusAllGather(hashes.data(), all.data(), hashes.size(), chorusUint64, comm, nullptr) != chorusSuccess) {
      std::fprintf(stderr, "FAIL rank %d: hash all-gather: %s\n", rank, chorusGetLastError(comm));
      ++failed;
    } else {
      for (size_t i = 0; i < hashes.size(); ++i) {
        for (int p = 0; p < n; ++p) {
          if (all[p * hashes.size() + i] != hashes[i]) {
            std::fprintf(stderr, "FAIL rank %d: result differs bitwise from rank %d: %s\n", rank, p,
                         cases[i].describe().c_str());
            ++failed;
            break;
          }
        }
      }
    }
  }
  std::printf("rank %d of %d: %d passed, %d failed\n", rank, n, passed, failed);
  std::fflush(stdout);
  chorusCommDestroy(comm);
#ifdef CHORUS_GRID_MPI
  MPI_Finalize();
#endif
  return failed == 0 ? 0 : 1;
}
