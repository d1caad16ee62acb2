"""What the suites measure with: the one timing core, streams and lanes, the pointer chase, data
checks, agreement between ranks, memory checks, Triton kernels, NCCL, NUMA placement."""

# How a point is measured, named: recorded in each run's meta.json (tool.method), so the tables of
# healthy machines (scripts/make_expected.py) pool the runs of every commit that measures alike, from
# as many hosts as the lent machines gave. Change it with any change to what a point's figure means
# (a clock, a launch, a check, the trials kept); not for which points a sweep holds, nor for analysis.
# A method that changed some suites only says which in scripts/make_expected.py (CHANGED_ONLY).
METHOD = "held-3"
