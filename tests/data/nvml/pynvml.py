"""A stand-in NVML (nvidia-ml-py's pynvml) of two H100s on NVSwitch, for planning without a GPU:
the calls a plan makes, answered as NVML answers them; every other call unsupported."""

_GPUS = [("GPU-5d1c9a7e-0000", "00000000:18:00.0"), ("GPU-5d1c9a7e-1111", "00000000:2A:00.0")]


class NVMLError(Exception):
    pass


class _Memory:
    total, free, used = 80 << 30, 79 << 30, 1 << 30


class _Pci:
    def __init__(self, bus_id: str) -> None:
        self.busId = bus_id


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return len(_GPUS)


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetUUID(handle: int) -> str:
    return _GPUS[handle][0]


def nvmlDeviceGetName(handle: int) -> str:
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetPciInfo(handle: int) -> _Pci:
    return _Pci(_GPUS[handle][1])


def nvmlDeviceGetMemoryInfo(handle: int) -> _Memory:
    return _Memory()


def nvmlDeviceGetMaxPcieLinkGeneration(handle: int) -> int:
    return 5


def nvmlDeviceGetMaxPcieLinkWidth(handle: int) -> int:
    return 16


def nvmlSystemGetDriverVersion() -> str:
    return "570.86.15"


def __getattr__(name: str):
    if not name.startswith("nvml"):
        raise AttributeError(name)

    def unsupported(*args):
        raise NVMLError(f"{name}: not supported")

    return unsupported
