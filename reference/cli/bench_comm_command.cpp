// Placeholder: the collective benchmark (tripod bench comm) is being written.
#include "cli/commands.h"
namespace tripod::cli {
void add_bench_comm_command(CLI::App&) {}
}  // namespace tripod::cli
