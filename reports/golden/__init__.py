"""Golden bundles on the Python side (reports/FORMATS.md sections 1 and 2): bundle.py reads and
validates a bundle, check.py holds a peer's results against its fp64 reference
(`/usr/bin/python3 -m reports.golden.check BUNDLE RESULTS.json`, or `tripod golden check`).
Both need only numpy; the PyTorch peers that produce results live in reports/peers/."""
