// describe_nonfinite_state (train/diverged_state.h): what anomaly.policy=rollback checks before a
// save counts exactly the elements a checkpoint writes - a region's runs, on the regions this rank
// saves - so that a padding element or an unsaved replica cannot roll back a healthy run, and an
// overflowed saved element always does.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/transfer.h"
#include "train/diverged_state.h"

namespace tripod {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class DivergedState : public ::testing::Test {
 protected:
  // A region of `values` whose local elements [1, 4) hold logical [0, 3): element 0 is padding.
  StateRegion region(const std::string& tensor, const std::string& kind, const std::vector<double>& values,
                     bool saves = true) {
    StateRegion r{tensor, {3}, kind, backend_.alloc({static_cast<int64_t>(values.size())}, DType::F32), {{1, 0, 3}},
                  saves};
    from_host_f64(backend_, values, r.local);
    return r;
  }
  cpu::CpuBackend backend_{Device::Host, "cpu"};
};

TEST_F(DivergedState, FiniteSavedRunsAreNothingToReport) {
  const std::vector<StateRegion> regions = {region("wte.weight", "param", {kInf, 1, 2, 3}),  // padding only
                                            region("wpe.weight", "param", {0, NAN, kInf, 1}, /*saves=*/false)};
  EXPECT_EQ(describe_nonfinite_state(backend_, regions, nullptr), "");
}

TEST_F(DivergedState, NamesTheTensorsAndCountsEveryNonFiniteSavedValue) {
  const std::vector<StateRegion> regions = {region("wte.weight", "param", {0, 1, -kInf, 3}),
                                            region("wte.weight", "adam_v", {0, NAN, kInf, 1}),
                                            region("wpe.weight", "param", {0, 1, 2, 3})};
  EXPECT_EQ(describe_nonfinite_state(backend_, regions, nullptr),
            "3 infinite or NaN values in the parameters and AdamW moments (wte.weight (param), wte.weight (adam_v))");
  EXPECT_EQ(describe_nonfinite_state(backend_, {regions[0]}, nullptr),
            "1 infinite or NaN value in the parameters and AdamW moments (wte.weight (param))");
}

TEST_F(DivergedState, TheInfUpdateFaultOverflowsTheFirstSavedParameterElement) {
  std::vector<StateRegion> regions = {region("wte.weight", "adam_m", {0, 1, 2, 3}),
                                      region("wpe.weight", "param", {0, 1, 2, 3}, /*saves=*/false),
                                      region("h.0.ln_1.weight", "param", {0, 1, 2, 3})};
  ASSERT_TRUE(overflow_first_saved_parameter(backend_, regions));
  EXPECT_EQ(to_host_f64(backend_, regions[2].local), (std::vector<double>{0, kInf, 2, 3}));  // its first run's first
  EXPECT_EQ(to_host_f64(backend_, regions[1].local), (std::vector<double>{0, 1, 2, 3}));     // a replica: untouched
  EXPECT_EQ(describe_nonfinite_state(backend_, regions, nullptr),
            "1 infinite or NaN value in the parameters and AdamW moments (h.0.ln_1.weight (param))");
  regions.pop_back();
  EXPECT_FALSE(overflow_first_saved_parameter(backend_, regions));  // nothing this rank saves
}

}  // namespace
}  // namespace tripod
