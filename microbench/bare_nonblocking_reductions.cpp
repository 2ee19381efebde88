// tripod_bare_nonblocking_reductions: why MpiCommunicator issues a non-blocking reduce_scatter as
// one MPI_Ireduce per block (comm/mpi_ops.cpp, reduce_per_block) instead of
// MPI_Ireduce_scatter_block. Bare MPI, nothing of Tripod: for each size (the whole input, float
// sum, in place as the gradient buckets do it), the two forms alternate -r times in one run, each
// started and then waited for, and the slowest rank's time per call is kept; the medians print
// side by side, with MPI_Iallreduce of the same input for reference (its algorithm is whatever
// the environment chose: Tripod asks for the ring, see comm/mpi_algorithms.h).
//
// usage: mpirun -np N tripod_bare_nonblocking_reductions [-b minbytes] [-e maxbytes] [-f factor] [-r repeats]
// prints one line per size: "bytes reduce_scatter_block_us per_block_reduces_us ratio iallreduce_us"
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "size_argument.h"

namespace {

double slowest_rank_seconds(const std::function<void()>& call) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  call();
  double seconds = MPI_Wtime() - start;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  SizeSweep sweep{1 << 20, 32 << 20, 4};
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::map<std::string, long long> flags = {{"-r", 9}};
  std::string error = read_command_line(argc, argv, sweep, flags, 4LL * ranks);
  if (error.empty() && flags["-r"] < 1) error = "-r must be at least 1";
  if (!error.empty()) {
    std::fprintf(stderr, "tripod_bare_nonblocking_reductions: %s\n", error.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const auto [min_bytes, max_bytes, factor] = sweep;
  const int repeats = static_cast<int>(flags["-r"]);
  std::vector<float> data(static_cast<std::size_t>(max_bytes / 4), 1.0f);
  if (rank == 0)
    std::printf("# %d ranks, in place, float sum, medians of %d (slowest rank)\n"
                "# bytes  reduce_scatter_block_us  per_block_reduces_us  ratio  iallreduce_us\n",
                ranks, repeats);
  for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const int block = static_cast<int>(bytes / 4 / ranks);
    float* in = data.data();
    float* mine = in + static_cast<std::size_t>(rank) * block;
    auto library = [&] {
      MPI_Request request;
      MPI_Ireduce_scatter_block(MPI_IN_PLACE, in, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    };
    auto per_block = [&] {
      std::vector<MPI_Request> requests(static_cast<std::size_t>(ranks));
      for (int root = 0; root < ranks; ++root) {
        const void* send = root == rank ? MPI_IN_PLACE : in + static_cast<std::size_t>(root) * block;
        MPI_Ireduce(send, root == rank ? mine : nullptr, block, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD,
                    &requests[static_cast<std::size_t>(root)]);
      }
      MPI_Waitall(ranks, requests.data(), MPI_STATUSES_IGNORE);
    };
    auto all_reduce = [&] {
      MPI_Request request;
      MPI_Iallreduce(MPI_IN_PLACE, in, block * ranks, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    };
    std::vector<double> a, b, c;
    library();  // warm-up: connections, temporaries
    per_block();
    all_reduce();
    for (int r = 0; r < repeats; ++r) {
      std::fill(data.begin(), data.end(), 1.0f);  // in place sums grow: start from the same values
      a.push_back(slowest_rank_seconds(library));
      std::fill(data.begin(), data.end(), 1.0f);
      b.push_back(slowest_rank_seconds(per_block));
      std::fill(data.begin(), data.end(), 1.0f);
      c.push_back(slowest_rank_seconds(all_reduce));
    }
    if (rank == 0)
      // The bytes reduced: whole blocks of a float per rank (the size asked for, rounded down to them).
      std::printf("%lld %.1f %.1f %.2f %.1f\n", 4LL * block * ranks, 1e6 * median(a), 1e6 * median(b), median(b) / median(a),
                  1e6 * median(c));
  }
  MPI_Finalize();
  return 0;
}
