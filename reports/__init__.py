"""Plots and reports from Tripod's JSON results; run each as a module from the source tree,
e.g. /usr/bin/python3 -m reports.plot_bench runs/bench/bench.json --out runs/bench/plots."""
