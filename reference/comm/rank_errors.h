// Errors in a job of many ranks: each rank reports its own, naming itself, and the job ends with a
// non-zero exit instead of hanging.
//   before any communication, every rank checks what it has: each that fails reports, then every
//     rank learns whether any failed (an all-reduce, which also waits for the reports: mpirun kills
//     the remaining ranks as soon as one exits non-zero, which would cut their messages short), and
//     then all exit 1;
//   during communication a rank may fail alone (a file only it reads) while the others wait in a
//     collective: it reports and aborts the whole job.
#pragma once
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace tripod {

// "rank 3 of 8: "
std::string rank_prefix(const Communicator& world);
// Runs `checks` on every rank; a rank that fails reports it (tripod: error: rank r of n: ...), and
// if any failed, every rank throws an empty Error (already reported: the program exits 1).
void check_on_every_rank(Communicator& world, const std::function<void()>& checks);
// Runs `work`; on an error, reports it and aborts every rank of the job (a world of one: throws an
// empty Error instead). Other exceptions too (std::bad_alloc: "tripod: internal error: rank r of n:
// ...", exit 2; a filesystem_error: exit 1); a world of one rethrows them to main.
void run_or_abort_job(Communicator& world, const std::function<void()>& work);
// Ends every rank of the launch with `exit_code` (MPI_Abort; a process without a running MPI exits
// alone). From the thread that communicates: the others are blocked in collectives of their own.
[[noreturn]] void abort_job(int exit_code);

}  // namespace tripod
