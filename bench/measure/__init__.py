"""What the suites measure with: the one timing core, streams and lanes, the pointer chase, data
checks, agreement between ranks, memory checks, Triton kernels, NCCL, NUMA placement."""
