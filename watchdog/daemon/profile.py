"""Which accelerator profile this host gets (`core/accelerators.py` has the rule): asked once, at start.

The metadata server's machine type decides first (one GET of instance/machine-type and of the TPU
attribute, bounded by the connect timeout: a server that is down at boot costs at most that, and the
choice then falls to the device nodes present); `devices.profile` other than "auto" asks nothing. The
choice and why are logged once; a change (a GPU driver loaded later, a reconfigured VM) needs a restart.
"""

from __future__ import annotations

import logging

from watchdog.config.settings import Config
from watchdog.core.accelerators import AUTO, HostFacts, ProfileChoice, choose_profile
from watchdog.core.identity import ACCELERATOR_TYPE, MACHINE_TYPE
from watchdog.core.vocabulary import Output
from watchdog.daemon.outputs import Outputs
from watchdog.host.holders import nodes_present
from watchdog.metadata.identity import fetch_identity
from watchdog.metadata.transport import MetadataTransport

log = logging.getLogger("tpu-watchdog")


def host_profile(config: Config, transport: MetadataTransport | None = None) -> ProfileChoice:
    """The profile for `config` on this host; `transport` None: the device nodes alone (drill, readiness)."""
    if config.profile != AUTO:
        return choose_profile(config.profile, HostFacts())
    answers: dict[str, str | None] = {}
    if transport is not None:
        answers = fetch_identity(transport, (MACHINE_TYPE, ACCELERATOR_TYPE)).values
    facts = HostFacts(
        machine_type=answers.get(MACHINE_TYPE) or "",
        tpu_accelerator_type=answers.get(ACCELERATOR_TYPE) or "",
        gpu_nodes=nodes_present(config.nvidia_devices),
        tpu_nodes=nodes_present(config.devices),
    )
    return choose_profile(AUTO, facts)


def say_profile(choice: ProfileChoice, config: Config, outputs: Outputs) -> None:
    """The choice's line, guarded: a log that fails at start must not stop the daemon being built."""
    patterns = config.nvidia_devices if choice.profile.value == "nvidia-gpu" else config.devices
    with outputs.guarded(Output.LOG):
        log.info(
            "accelerator profile %s (%s): watching %s", choice.profile.value, choice.why, " ".join(patterns)
        )
