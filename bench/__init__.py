"""xferbench: GPU interconnect and transfer throughput benchmarks."""

__version__ = "0.1.0"

# Every process the harness starts inherits these unless the user set them: NVLink multicast
# (NVLS) can take a shared host's GPUs out of service, so it stays off by default.
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


class ConfigError(ValueError):
    """Bad input, reported as one line and exit code 2 before any GPU work."""
