"""Which accelerator this host has (the profile), which NVIDIA nodes are GPUs, and which processes are GPU
agents rather than jobs. Pure: names, numbers and answers in, verdicts out (docs/gpu-vms.md).

GCE GPU VMs (A2, A3, A4, G2: A100, H100, H200, B200, L4) cannot live-migrate either: they get the same
maintenance-event, preempted and upcoming-maintenance notices, and their jobs checkpoint on SIGTERM. What
differs is the device files and who holds them:
- each GPU is one node, /dev/nvidiaN, character major 195, minor N; the nodes every CUDA process opens
  (nvidiactl 195:255, nvidia-modeset 195:254, nvidia-uvm, nvidia-uvm-tools, nvidia-nvswitchctl,
  nvidia-caps/*) say nothing about which job uses which GPU, so holding one of them never makes a holder;
- agents hold every GPU for a living (nvidia-persistenced for its whole life, nv-hostengine and the DCGM
  exporter for monitoring, nvidia-smi while it runs): signalling them saves no work and breaks monitoring.
  They are known by name (the executable's, or the 15-character comm the kernel keeps). A job that names
  itself like an agent only spares itself its own SIGTERM: it can never make another process signalled, and
  the list is extended only through the configuration, which only root may write.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass


class Profile(enum.Enum):
    TPU = "tpu"
    NVIDIA_GPU = "nvidia-gpu"


AUTO = "auto"
PROFILE_CHOICES = (AUTO, Profile.TPU.value, Profile.NVIDIA_GPU.value)

NVIDIA_PCI_VENDOR = "0x10de"  # /sys/bus/pci/devices/*/vendor of every NVIDIA GPU
NVIDIA_DRIVER = "nvidia"  # the kernel module bound to them
NVIDIA_MAJOR = 195  # the nvidia driver's fixed character major (/proc/devices: nvidia-frontend or nvidia)
NVIDIA_SHARED_MINORS = frozenset({254, 255})  # nvidia-modeset, nvidiactl: the GPUs are minors 0..253
NVIDIA_SHARED_NAMES = frozenset({
    "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-nvswitchctl",
})  # fmt: skip
NVIDIA_CAPS_DIR = "nvidia-caps"  # /dev/nvidia-caps/nvidia-capN: MIG capabilities, shared
NVIDIA_PATTERNS = ("/dev/nvidia[0-9]*",)  # one node per GPU (nvidia0..nvidiaN)
GPU_AGENTS = ("nvidia-persistenced", "nv-hostengine", "dcgm-exporter", "nvidia-smi")
COMM_LENGTH = 15  # TASK_COMM_LEN - 1: /proc/PID/comm keeps the first 15 bytes of the executable's name

# Accelerator-optimized families whose machine type attaches GPUs (A2 A100, A3 H100/H200, A4 B200, A4X
# GB200, G2 L4, G4 RTX PRO 6000). An N1 VM with GPUs added is told apart by its device nodes only.
GPU_FAMILIES = frozenset({"a2", "a3", "a4", "a4x", "g2", "g4"})
TPU_FAMILIES = frozenset({"ct3", "ct3p", "ct4p", "ct5l", "ct5lp", "ct5p", "ct6e", "tpu7x"})


def machine_type_name(text: str) -> str:
    """`projects/NUM/machineTypes/a3-highgpu-8g` (instance/machine-type) -> `a3-highgpu-8g`."""
    return text.strip().rsplit("/", 1)[-1]


@dataclass(frozen=True)
class HostFacts:
    """What the profile is chosen from: the metadata server's answers ("" : none, or not asked) and whether
    any node of each profile's patterns exists now."""

    machine_type: str = ""
    tpu_accelerator_type: str = ""  # instance/attributes/accelerator-type: only TPU VMs have it
    gpu_nodes: bool = False
    tpu_nodes: bool = False


@dataclass(frozen=True)
class ProfileChoice:
    profile: Profile
    why: str


def choose_profile(configured: str, facts: HostFacts) -> ProfileChoice:
    """`devices.profile` and the host's facts -> the profile. The metadata server's machine type first (it
    is there before any driver has made a node), then the TPU attribute, then the nodes; with nothing to go
    by, TPU, the daemon's first home."""
    if configured != AUTO:
        return ProfileChoice(Profile(configured), f'devices.profile = "{configured}"')
    family = machine_type_name(facts.machine_type).split("-", 1)[0]
    if family in GPU_FAMILIES:
        return ProfileChoice(Profile.NVIDIA_GPU, f"machine type {machine_type_name(facts.machine_type)}")
    if family in TPU_FAMILIES or facts.tpu_accelerator_type:
        shown = facts.tpu_accelerator_type or machine_type_name(facts.machine_type)
        return ProfileChoice(Profile.TPU, f"TPU host ({shown})")
    if facts.gpu_nodes and not facts.tpu_nodes:
        return ProfileChoice(Profile.NVIDIA_GPU, "NVIDIA GPU device nodes present")
    if facts.tpu_nodes:
        return ProfileChoice(Profile.TPU, "TPU device nodes present")
    return ProfileChoice(Profile.TPU, "no accelerator identified: the TPU profile")


def nvidia_shared(path: str, number: tuple[int, int] | None) -> bool:
    """A node every CUDA process opens (by name, or by number for nvidiactl and nvidia-modeset): holding it
    never makes a holder, whatever pattern matched it."""
    if number is not None and number[0] == NVIDIA_MAJOR and number[1] in NVIDIA_SHARED_MINORS:
        return True
    parent, name = os.path.split(os.path.normpath(path))
    return name in NVIDIA_SHARED_NAMES or os.path.basename(parent) == NVIDIA_CAPS_DIR


def nvidia_gpu_index(number: tuple[int, int]) -> int | None:
    """The GPU a node is by its number (195:N, N < 254: GPU N), or None: not one of the driver's GPUs."""
    major, minor = number
    if major == NVIDIA_MAJOR and minor not in NVIDIA_SHARED_MINORS and minor < min(NVIDIA_SHARED_MINORS):
        return minor
    return None


def is_agent(comm: str, executable: str, agents: Collection[str]) -> bool:
    """Whether a process is a GPU agent: its executable's name (`executable`, from /proc/PID/exe or argv[0])
    is one of `agents`, or its comm is one of them cut to the kernel's 15 characters."""
    if os.path.basename(executable) in agents:
        return True
    return any(comm == agent[:COMM_LENGTH] for agent in agents if comm)


def gpu_agents(extra: Iterable[str] = ()) -> frozenset[str]:
    """The agents a GPU host's scan leaves alone: the built-in ones and `devices.gpu_agents`."""
    return frozenset(GPU_AGENTS).union(extra)


def agent_note(pid: int, name: str) -> str:
    """What `drill` and `readiness` say of an agent holding a GPU."""
    return f"note: pid {pid} ({name}) is a GPU agent: left alone, never signalled\n"


@dataclass(frozen=True)
class CrossCheck:
    """The holder scan against NVML's compute processes: who one sees and the other does not."""

    scan_only: tuple[int, ...] = ()  # hold a GPU node, no compute context NVML knows (yet, or not here)
    nvml_only: tuple[int, ...] = ()  # a compute context, yet no GPU node held that the scan saw

    def __bool__(self) -> bool:
        return bool(self.scan_only or self.nvml_only)

    def sentences(self, names: dict[int, str]) -> list[str]:
        def who(pids: tuple[int, ...]) -> str:
            return ", ".join(f"{pid} ({names[pid]})" if pid in names else str(pid) for pid in pids)

        said = []
        if self.scan_only:
            said.append(
                f"holding a GPU, unknown to NVML: pid {who(self.scan_only)} (no CUDA context yet, or "
                "another PID namespace than NVML's host PIDs)"
            )
        if self.nvml_only:
            said.append(
                f"NVML lists compute processes the scan did not find holding a GPU node: pid "
                f"{who(self.nvml_only)} (the daemon in another PID namespace, or devices.nvidia_patterns "
                "missing their nodes); they would not be signalled"
            )
        return said


def cross_check(scanned: Iterable[int], nvml: Iterable[int]) -> CrossCheck:
    """`scanned`: the scan's holders and agents; `nvml`: NVML's compute processes (host PIDs)."""
    seen, listed = set(scanned), set(nvml)
    return CrossCheck(tuple(sorted(seen - listed)), tuple(sorted(listed - seen)))
