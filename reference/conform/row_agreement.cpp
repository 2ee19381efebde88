#include "conform/row_agreement.h"

#include <vector>

#include "comm/host_collectives.h"

namespace tripod::conform {

void agree(Communicator& world, Outcome& o, const std::string& my_failure) {
  const std::vector<double> v =
      all_reduce_values(world, {o.errors.pass ? 0.0 : 1.0, o.seconds_per_step, o.peak_mib, o.accounted_mib,
                                o.transient_mib, o.errors.error_over_bound},
                        ReduceOp::Max);
  const std::vector<std::string> reasons = all_gather_text(world, o.errors.pass ? "" : my_failure);
  o.errors.pass = v[0] == 0.0;
  o.seconds_per_step = v[1];
  o.peak_mib = v[2];
  o.accounted_mib = v[3];
  o.transient_mib = v[4];
  // The largest over the ranks: a rank whose row ended in an error measured nothing (infinitely
  // far), and rank 0, which reports, may not be that rank.
  o.errors.error_over_bound = v[5];
  if (o.errors.pass) return;
  for (std::size_t r = 0; r < reasons.size(); ++r)
    if (!reasons[r].empty()) {
      o.errors.failure = reasons[r] == my_failure ? my_failure : "rank " + std::to_string(r) + ": " + reasons[r];
      return;
    }
}

}  // namespace tripod::conform
