// The clock a core of this CPU actually runs at, for the nominal CPU peak (perf/device_peak.h).
//
// /proc/cpuinfo's "cpu MHz" is no guide on a virtual machine: there it is the host's base (TSC)
// clock, fixed, while the core runs at its boost clock. On this project's 2-core AMD EPYC VM it
// says 2445 MHz and the cores run at about 3090: a peak taken from it put a measured sgemm at 115 %.
// So the clock is measured: a chain of dependent integer additions retires one a cycle on every
// x86-64 core since the Pentium Pro, and their rate is the clock. The best of a few short runs
// (about 10 ms each) is kept, since being descheduled only ever makes a run slower. It is the
// clock of one busy core: with every core running wide vector code it may be lower, so the peak
// stays an upper bound.
#pragma once

namespace tripod {

// The measured clock in MHz, once per process (about 30 ms the first time); 0 where it cannot
// be measured (not x86-64).
double measured_cpu_clock_mhz();

}  // namespace tripod
