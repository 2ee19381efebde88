// Placeholder: the scaling-law sweep driver (tripod scale run) is being written.
#include "cli/commands.h"
namespace tripod::cli {
void add_scale_commands(CLI::App& app) { app.add_subcommand("scale", "scaling-law sweeps (not yet available)"); }
}  // namespace tripod::cli
