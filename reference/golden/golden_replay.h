// `tripod golden run BUNDLE --precision fp32|fp64 --out RESULTS.json [--layout NAME]`: Tripod as a
// peer of its own bundles. It trains the bundle's K steps from its weights and batches in any
// parallel layout (under mpirun) and writes results in the peer format `tripod golden check`
// reads (reports/FORMATS.md section 2): one process reproduces the bundle's reference bit for bit;
// other layouts differ by their reduction order only.
#pragma once
#include <filesystem>
#include <string>

#include "comm/world.h"

namespace tripod::golden {

struct ReplayOptions {
  std::filesystem::path bundle, out;
  std::string precision = "fp32";  // fp32 or fp64
  std::string layout;              // a layout name (tripod conform's); empty: dp over every rank, ZeRO-0
  std::string backend = "cpu";
  CommSettings comm;
};

void replay_golden_bundle(const ReplayOptions& options);

}  // namespace tripod::golden
