// Placeholder: replaced by the real command.
#include "cli/commands.h"

namespace tripod::cli {
void add_report_command(CLI::App&) {}
}  // namespace tripod::cli
