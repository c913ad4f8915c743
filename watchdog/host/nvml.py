"""NVML's view of who computes on the GPUs, for a cross-check of the holder scan (daemon/gpucheck.py).

Optional: the `nvidia-ml-py` package (`import pynvml`) is not a dependency of the daemon, which needs
nothing of NVML to drain; with it installed and a GPU present, `nvmlDeviceGetComputeRunningProcesses`
lists each GPU's processes with a compute context. Its PIDs are the host's (the driver ignores PID
namespaces) and it misses processes without a CUDA context (one that has opened /dev/nvidia0 and not yet
initialised CUDA), so it is a second opinion, never a reason to signal. `GpuProcesses` is the interface the
cross-check takes; `Nvml` is the real one (tests/host/test_nvml.py runs it where a GPU exists).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class GpuProcesses(Protocol):
    def compute_processes(self) -> Mapping[int, frozenset[int]]:
        """Host PID -> the indices of the GPUs it has a compute context on; raises OSError on failure."""
        ...


class Nvml:
    """NVML through nvidia-ml-py, initialised once; `open()` says why not when it cannot be."""

    def __init__(self, module: Any) -> None:
        self._nvml = module

    @classmethod
    def open(cls) -> tuple[Nvml | None, str]:
        """The real NVML, or None and why (the package missing, no driver, no GPU)."""
        try:
            import pynvml  # type: ignore[import-not-found,unused-ignore]  # optional: nvidia-ml-py
        except ImportError:
            return None, "the nvidia-ml-py package is not installed (pip install nvidia-ml-py)"
        try:
            pynvml.nvmlInit()
            count = int(pynvml.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001 - NVMLError and its many subclasses; said, never fatal
            return None, f"NVML did not start: {exc}"
        if count == 0:
            return None, "NVML sees no GPU"
        return cls(pynvml), f"NVML sees {count} GPU(s)"

    def compute_processes(self) -> Mapping[int, frozenset[int]]:
        nvml = self._nvml
        found: dict[int, set[int]] = {}
        try:
            for index in range(int(nvml.nvmlDeviceGetCount())):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    found.setdefault(int(process.pid), set()).add(index)
        except Exception as exc:
            raise OSError(f"NVML: {exc}") from exc
        return {pid: frozenset(gpus) for pid, gpus in found.items()}
