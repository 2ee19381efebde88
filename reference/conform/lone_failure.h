// A rank that fails alone. When an error takes one rank out of a layout, the others go on into
// the layout's next collective and wait there for it, forever; the rank that failed cannot tell
// them, but it can tell that they do not come to the row's end. It waits for them there for a
// grace, then ends the job with its own error instead of leaving the job to wait out --timeout.
#pragma once
#include <chrono>

#include "comm/communicator.h"

namespace tripod::conform {

// The grace: 10 s, or three times as long as the row ran on the failed rank, whichever is longer.
// The others run the same layout, so they finish it in about the same time, or never. -1 (no grace:
// wait, and let the row's --timeout report it) where the grace would reach the timeout.
double lone_failure_grace(double row_seconds, double timeout_seconds);

// Polls `request` (test(), making progress) until it completes (true) or `seconds` have passed.
bool completes_within(CommRequest& request, double seconds);

}  // namespace tripod::conform
