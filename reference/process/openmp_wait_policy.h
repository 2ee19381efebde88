// OpenMP's idle threads wait for work by spinning: libgomp polls some 300,000 times before it
// sleeps. On a machine whose cores something else also wants (a CI runner building, a laptop), a
// spinning thread holds the core that the thread it waits for needs, and a step crawls. Measured
// on this project's 2-core machine (bench train, medians of 5 steps, two busy loops beside it for
// "loaded"; 2026-12-04):
//
//                       idle: default  10,000 polls  PASSIVE   loaded: default  10,000 polls  PASSIVE
//   small (B4 x T128)        0.13 s      0.12 s      0.15 s            2.1-2.2 s   0.43-0.66 s  0.59-0.70 s
//   gpt2-124m (B2 x T64)     0.72 s      0.67-0.75 s 0.69-1.46 s       6.3-6.8 s   3.3-4.0 s    1.3-3.9 s
//
// Sleeping at once (PASSIVE) costs a wake-up per parallel region when idle (tiny: 0.012 s a step
// by default, 0.023 passive); a short spin keeps the idle speed and bounds the loss when loaded.
// libgomp reads GOMP_SPINCOUNT once, when it is loaded, before main: so tripod sets it to 10,000
// and executes itself again at start (process/load_time_settings.h), unless the user chose
// (OMP_WAIT_POLICY or GOMP_SPINCOUNT set).
#pragma once
#include <string>

#include "process/load_time_settings.h"

namespace tripod {

// GOMP_SPINCOUNT=10000 (and a mark that tripod set it), or nothing where the user chose.
EnvironmentSettings openmp_spinning_settings();

// "spins 10000 polls, then sleeps (GOMP_SPINCOUNT, set by tripod; ...)", "PASSIVE
// (OMP_WAIT_POLICY)", ...: how this process's idle OpenMP threads wait and who chose it.
std::string openmp_wait_text();

}  // namespace tripod
