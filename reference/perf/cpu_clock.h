// The clock a core of this CPU actually runs at, for the nominal CPU peak (perf/device_peak.h).
//
// /proc/cpuinfo's "cpu MHz" is no guide on a virtual machine: there it is the host's base (TSC)
// clock, fixed, while the core runs at its boost clock. On this project's 2-core AMD EPYC VM it
// says 2445 MHz and the cores run at about 3090: a peak taken from it put a measured sgemm at 115 %.
// So the clock is measured: a chain of dependent register additions retires one a cycle, and a
// chain of dependent 64-bit multiplications one every three cycles, on every x86-64 core of the
// last twenty years; their rates give the clock. Two chains, and the lower clock kept, because a
// core may shortcut a chain: the Xeon this project moved to on 2026-12-05 folds additions of an
// immediate (`add $1, reg`, the one chain measured until then) in its renamer and ran them at 4-6
// a cycle, which read as 13-24 GHz and cut every CPU MFU by as much. Each run is timed on the
// thread's CPU clock (time spent descheduled is not its own) and the best of 16 short runs (about
// 1 ms each) is kept per chain, since an interruption only ever makes a run slower. It
// is the clock of one busy core: with every core running wide vector code it may be lower, so the
// peak stays an upper bound.
#pragma once

namespace tripod {

// The measured clock in MHz, once per process (about 35 ms the first time); 0 where it cannot
// be measured (not x86-64).
double measured_cpu_clock_mhz();

}  // namespace tripod
