// A fatal signal (a segmentation fault, an abort, a bus error, an illegal instruction, a
// floating-point trap) prints the program's stack to stderr before the process dies of it, with
// its exit status unchanged (128 + the signal). The first GPU run of the bf16-operand GEMMs died
// of a segmentation fault with no word of where; finding the function took a second lease (a
// debugger's backtrace). Each frame prints as `binary(+0xOFFSET) [0xADDRESS]`;
// reports/symbolize_stack.py names the functions from a build with symbols (the bundle's
// binaries keep theirs; the unstripped build dir has them too).
#pragma once

namespace tripod {

// Installs the handler for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (on an alternate stack for
// the calling thread, so that a stack overflow can still print). `program` names the process in
// the report's first line, with its rank where a launcher set one (OMPI_COMM_WORLD_RANK, PMI_RANK,
// PMIX_RANK, SLURM_PROCID or RANK). Once per process, early in main.
void install_crash_report(const char* program);

}  // namespace tripod
