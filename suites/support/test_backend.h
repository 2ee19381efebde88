// The backend every suite computes on: "cpu" unless TRIPOD_TEST_BACKEND names another. CTest runs
// the unit and multi-rank suites a second time with TRIPOD_TEST_BACKEND=emulated, so every test
// also proves that its path never reads device memory from the host, and (multi-rank) that every
// collective on device tensors is staged through host memory correctly.
#pragma once
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "comm/mpi_communicator.h"
#include "comm/staged_communicator.h"

namespace tripod::testing {

inline std::string test_backend_name() {
  const char* name = std::getenv("TRIPOD_TEST_BACKEND");
  return name != nullptr && *name != '\0' ? name : "cpu";
}

inline std::unique_ptr<Backend> make_test_backend() { return make_backend(test_backend_name()); }

// One backend for the life of the process, for the communicators that stage device tensors (any
// instance of a backend moves any of its device's tensors).
inline Backend& shared_test_backend() {
  static const std::unique_ptr<Backend> backend = make_test_backend();
  return *backend;
}

// The world as the suites' tensors need it: MPI's, staged through the host for a device backend.
// chunk_bytes: MPI reductions larger than this go in pieces (comm/reduction_pieces.h).
inline std::unique_ptr<Communicator> test_world(int64_t chunk_bytes = kDefaultMpiChunkBytes) {
  return communicator_for(mpi_world(chunk_bytes), shared_test_backend());
}

}  // namespace tripod::testing
