"""``MirroredStrategy``: synchronous all-reduce across the devices of one host.

One process per replica. On a GPU host every visible GPU is a replica; on a CPU host the replica count is a
parameter and each replica gets its share of the cores. Run as a plain script (``python train.py``), the strategy
hands the script to stratagem's launcher, which starts one process per replica; under ``stratagem run`` (or
torchrun) it joins the processes already started.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import torch
from typing_extensions import override

from stratagem.distribute._collective import CollectiveStrategy
from stratagem.distribute.cluster import TorchrunClusterResolver
from stratagem.distribute.one_device import parse_device, replica_device
from stratagem.distribute.options import CommunicationOptions
from stratagem.errors import ConfigurationError

DISABLE_SCRIPT_LAUNCH_ENV = "STRATAGEM_DISABLE_SCRIPT_LAUNCH"


class OneHostStrategy(CollectiveStrategy):
    """Base of the strategies with one process per device of one host (Mirrored, CentralStorage).

    Run as a plain script, the strategy starts the other replicas itself; under ``stratagem run`` (or torchrun) it
    joins the processes already started.
    """

    def __init__(self, devices: list[str] | None, *, num_replicas: int | None,
                 communication_options: CommunicationOptions | None) -> None:
        self._devices, self._explicit = _parse_devices(devices, num_replicas)
        super().__init__(communication_options=communication_options)

    @override
    def _resolve(self) -> tuple[int, int, int, int, str, int, torch.device]:
        wanted = len(self._devices)
        if "RANK" not in os.environ:
            if wanted > 1:
                _launch_script(wanted)  # does not return
            return 0, 1, 0, 1, "127.0.0.1", 0, self._devices[0]
        resolver = self._cluster_resolver = TorchrunClusterResolver()
        if resolver.local_world_size != resolver.world_size:
            raise ConfigurationError(
                f"{type(self).__name__} runs on one host, but this job spans several ({resolver.world_size} processes, "
                f"{resolver.local_world_size} on this host). Use MultiWorkerMirroredStrategy for multi-host jobs. "
                f"Received: world_size={resolver.world_size}, local_world_size={resolver.local_world_size}")
        if self._explicit and wanted != resolver.world_size:
            raise ConfigurationError(
                f"The strategy asks for {wanted} replicas but the job was launched with "
                f"{resolver.world_size} processes (one per replica). Launch with -n {wanted}, or "
                f"drop the replica count. Received: replicas={wanted}, world_size={resolver.world_size}")
        device = self._devices[resolver.local_rank] if self._explicit else replica_device(resolver.local_rank)
        return (resolver.rank or 0, resolver.world_size, resolver.local_rank, resolver.local_world_size,
                resolver.master_addr, resolver.master_port, device)


class MirroredStrategy(OneHostStrategy):
    """Synchronous data parallelism on one host, gradients all-reduced by DDP.

    Args:
        devices: Devices to replicate over, e.g. ``["cuda:0", "cuda:1"]`` or TF's ``["/gpu:0", "/gpu:1"]``;
            ``["cpu:0", "cpu:1"]`` asks for two CPU replicas. Default: every visible GPU, else one CPU replica.
        num_replicas: Number of CPU replicas (a shorthand for ``devices``).
        communication_options: ``CommunicationOptions`` (timeout, buckets).
        cross_device_ops: TF's all-reduce algorithm choice (``NcclAllReduce()``, ...): accepted with one warning and
            unused, since torch.distributed picks the algorithm and every choice sums the same gradients
            (``CommunicationOptions(implementation=)`` chooses the backend).

    Example:
        >>> strategy = MirroredStrategy(num_replicas=2)  # doctest: +SKIP
        >>> with strategy.scope():  # doctest: +SKIP
        ...     model = stratagem.Model(build_cnn())
        ...     model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    """

    def __init__(self, devices: list[str] | None = None, *, num_replicas: int | None = None,
                 communication_options: CommunicationOptions | None = None, cross_device_ops: Any = None) -> None:
        super().__init__(devices, num_replicas=num_replicas, communication_options=communication_options)
        if cross_device_ops is not None and self.is_chief:
            warnings.warn(
                f"MirroredStrategy(cross_device_ops={type(cross_device_ops).__name__}(...)) is accepted and not "
                "used: torch.distributed picks the all-reduce algorithm (NCCL on GPUs, gloo's ring on CPUs; "
                "CommunicationOptions(implementation=) chooses the backend). Gradients are summed the same way.",
                stacklevel=2,
            )


def _parse_devices(devices: list[str] | None, num_replicas: int | None) -> tuple[list[torch.device], bool]:
    """Returns the replica devices and whether the user named them."""
    if devices is not None and num_replicas is not None:
        raise ValueError(
            f"Pass devices or num_replicas, not both. Received: devices={devices!r}, num_replicas={num_replicas}")
    if num_replicas is not None:
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1. Received: num_replicas={num_replicas}")
        return [torch.device("cpu")] * num_replicas, True
    if devices is not None:
        if not devices:
            raise ValueError("devices must name at least one device. Received: devices=[]")
        parsed = [parse_device(d) for d in devices]
        if len({d.type for d in parsed}) > 1:
            raise ValueError(f"All devices must be of one type. Received: devices={devices!r}")
        return parsed, True
    if torch.cuda.is_available():
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())], False
    return [torch.device("cpu")], False


def _launch_script(num_processes: int) -> None:
    if os.environ.get(DISABLE_SCRIPT_LAUNCH_ENV):
        raise ConfigurationError(
            f"MirroredStrategy with {num_processes} replicas needs one process per replica, and starting them from "
            f"this process is disabled ({DISABLE_SCRIPT_LAUNCH_ENV} is set). Start the job with `stratagem run -n "
            f"{num_processes} script.py`. Received: num_replicas={num_processes}")
    main = sys.modules.get("__main__")
    if main is None or not getattr(main, "__file__", None):
        raise ConfigurationError(
            f"MirroredStrategy with {num_processes} replicas starts one process per replica by re-running your script, "
            "but this session has no script file (interactive or notebook). Save the code to a file and run `stratagem "
            f"run -n {num_processes} script.py`. Received: num_replicas={num_processes}")
    from stratagem.launcher.supervisor import relaunch_current_script

    sys.exit(relaunch_current_script(num_processes))
