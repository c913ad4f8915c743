"""The real NVML, where there is one: a GPU and the nvidia-ml-py package (run this file on a GPU VM, e.g.
`pip install nvidia-ml-py` into the venv, then `.venv/bin/pytest tests/host/test_nvml.py`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from watchdog.host.nvml import Nvml

HAS_PYNVML = importlib.util.find_spec("pynvml") is not None
HAS_GPU = os.path.exists("/dev/nvidia0")


def test_without_the_package_it_says_so() -> None:
    if HAS_PYNVML:
        pytest.skip("nvidia-ml-py is installed here: the missing-package answer cannot be seen")
    nvml, why = Nvml.open()
    assert nvml is None
    assert "nvidia-ml-py" in why


@pytest.mark.skipif(not (HAS_PYNVML and HAS_GPU), reason="needs a GPU (/dev/nvidia0) and nvidia-ml-py")
def test_the_real_nvml_lists_a_cuda_process_by_its_host_pid() -> None:
    nvml, why = Nvml.open()
    assert nvml is not None, why
    # A process with a CUDA context, through the CUDA driver API (libcuda, which the driver installs).
    child = subprocess.Popen(
        [sys.executable, "-c", (
            "import ctypes, sys, time\n"
            "cuda = ctypes.CDLL('libcuda.so.1')\n"
            "ctx = ctypes.c_void_p()\n"
            "assert cuda.cuInit(0) == 0 and cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n"
        )],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        assert 0 in nvml.compute_processes().get(child.pid, frozenset())
    finally:
        child.kill()
        child.wait()
