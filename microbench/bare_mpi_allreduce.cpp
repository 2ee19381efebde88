// tripod_bare_mpi_allreduce: the baseline for `tripod bench comm all_reduce` — the same loop
// written straight against MPI, with nothing of Tripod in it, so that compare_mpi_allreduce.sh can
// say what the Communicator layer costs.
//
// It measures exactly as the benchmark does (see reference/commbench/run.cpp): for each
// size (float sum, count = bytes / 4), -w untimed calls, MPI_Barrier, -n calls of the blocking
// MPI_Allreduce timed as one block, the mean per call averaged over ranks; out of place, then in
// place (MPI_IN_PLACE).
//
// usage: mpirun -np 2 tripod_bare_mpi_allreduce [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup]
// prints one line per size: "size_bytes out_of_place_us in_place_us"
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "size_argument.h"

namespace {

double mean_seconds_per_call(std::vector<float>& send, std::vector<float>& recv, int count, bool in_place, int iters,
                             int warmup) {
  const void* source = in_place ? MPI_IN_PLACE : static_cast<const void*>(send.data());
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(source, recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) MPI_Allreduce(source, recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double seconds = (MPI_Wtime() - start) / iters;
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return seconds / ranks;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  SizeSweep sweep{8, 32 << 20, 2};
  std::map<std::string, long long> flags = {{"-n", 20}, {"-w", 1}};
  std::string error = read_command_line(argc, argv, sweep, flags, 4);
  if (error.empty() && flags["-n"] < 1) error = "-n must be at least 1";
  if (!error.empty()) {
    std::fprintf(stderr, "tripod_bare_mpi_allreduce: %s\n", error.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const auto [min_bytes, max_bytes, factor] = sweep;
  const int iters = static_cast<int>(flags["-n"]), warmup = static_cast<int>(flags["-w"]);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<float> send(max_bytes / 4 + 1, 1.0f), recv(max_bytes / 4 + 1, 1.0f);
  for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const int count = static_cast<int>(bytes / 4);
    const double out_of_place = mean_seconds_per_call(send, recv, count, false, iters, warmup);
    std::fill(recv.begin(), recv.end(), 1.0f);  // in place sums grow: start from the same values
    const double in_place = mean_seconds_per_call(send, recv, count, true, iters, warmup);
    if (rank == 0) std::printf("%lld %.3f %.3f\n", static_cast<long long>(count) * 4, out_of_place * 1e6, in_place * 1e6);
  }
  MPI_Finalize();
  return 0;
}
