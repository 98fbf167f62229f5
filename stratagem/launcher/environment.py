"""The environment contract between the launcher and its worker processes.

Variables a worker reads, and who sets them:

- ``RANK``: global index of the process in the all-reduce group. Set by
  ``stratagem run`` (or torchrun).
- ``WORLD_SIZE``: number of processes in the group. Launcher.
- ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``: index and count of the processes on
  this host; picks the GPU. Launcher.
- ``HOROVOD_RANK`` / ``HOROVOD_SIZE`` / ``HOROVOD_LOCAL_RANK`` / ``HOROVOD_LOCAL_SIZE`` /
  ``HOROVOD_CROSS_RANK`` / ``HOROVOD_CROSS_SIZE``: the same layout under the names
  ``horovodrun`` exports, for Horovod scripts and tests that read them (cross:
  the host's index and the host count, ranks numbered host by host). Launcher.
- ``MASTER_ADDR`` / ``MASTER_PORT``: where rank 0 serves the rendezvous.
  Launcher: ``127.0.0.1`` and a free port unless ``--master-addr`` /
  ``--master-port`` name others.
- ``STRATAGEM_LAUNCHED``: ``1`` in processes the stratagem launcher started.
- ``STRATAGEM_TIMEOUT_S``: rendezvous and collective timeout. Launcher's
  ``--timeout``; the user may set it too.
- ``TF_CONFIG``: the TensorFlow cluster spec. Set by the user (one per host,
  TensorFlow style); passed through when the launcher starts one process per
  host. For ``-n N`` local replicas on one host the launcher replaces it with
  one per replica describing the same job as the variables above
  (``local_tf_configs``: worker i is rank i, worker 0's address is
  ``MASTER_ADDR:MASTER_PORT``), so code that reads ``TF_CONFIG`` works; it is
  dropped for a multi-host ``-n`` job, whose other hosts' addresses the
  launcher does not know. For ``--ps P --workers W`` the launcher generates one per
  task (``ps_cluster_configs``: chief, workers, servers, on free ports of
  ``--master-addr``). A one-process-per-host ``stratagem run train.py`` whose
  ``TF_CONFIG`` names a ``ps`` task runs the parameter server instead of the
  script.
- ``STRATAGEM_RESTART_COUNT``: how often the group was restarted before this
  start (0 on the first). Launcher (``--max-restarts``). In a ``--ps`` job it
  counts the restarts of that one worker, which is restarted alone; in an
  elastic job (``--nnodes MIN:MAX``) this host's earlier starts, a host joining
  included.
- ``TORCHELASTIC_ERROR_FILE``: where the worker records its uncaught exception
  (torch's ``@record`` layout: message, traceback, time) so the launcher can blame
  the first failure rather than the peers that failed because of it. Launcher.
- ``STRATAGEM_JOB_SECRET``: the job's secret; every gRPC call of a parameter-server job
  proves it and the rendezvous keeps its keys under a prefix derived from it
  (``stratagem.distribute.job_secret``). Launcher: a fresh one per one-host job, unless
  the user set it (or ``STRATAGEM_JOB_SECRET_FILE``, a file holding it), which is passed
  on; a multi-host job gets only the user's. ``STRATAGEM_TLS_CERT`` / ``_KEY`` / ``_CA``:
  the user's, passed on (TLS for the parameter servers).
- ``OMP_NUM_THREADS``: the host's cores divided by the local processes, unless
  the user set it. Launcher (``-n N``; ``--ps``, over all the job's tasks).
- ``PYTHONUNBUFFERED``: ``1``, so a worker's lines reach the launcher as they
  are printed. Launcher.
- ``KERAS_BACKEND``: ``torch``, unless the user set it, so a script that imports
  ``keras`` before stratagem gets the torch backend. Launcher (``-n N``, ``--ps``).
"""

from __future__ import annotations

import os

from stratagem._launched import RESTART_COUNT_ENV

LAUNCHED_ENV = "STRATAGEM_LAUNCHED"
KERAS_BACKEND_ENV = "KERAS_BACKEND"


def worker_env(
    *,
    rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    master_addr: str,
    master_port: int,
    timeout_s: float | None,
) -> dict[str, str]:
    """The variables the launcher sets for one worker (merged over the parent's environment)."""
    return _launched_env(timeout_s) | {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    } | _horovod_env(rank, world_size, local_rank, local_world_size)


def _horovod_env(rank: int, world_size: int, local_rank: int, local_world_size: int) -> dict[str, str]:
    # horovodrun's names for the same layout; hosts run local_world_size ranks each, numbered host by host.
    return {"HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(world_size), "HOROVOD_LOCAL_RANK": str(local_rank),
            "HOROVOD_LOCAL_SIZE": str(local_world_size), "HOROVOD_CROSS_RANK": str(rank // local_world_size),
            "HOROVOD_CROSS_SIZE": str(max(1, world_size // local_world_size))}


def threads_per_process(local_world_size: int) -> int:
    """This host's usable cores divided among ``local_world_size`` processes (at least 1 each)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // local_world_size)


def ps_task_env(*, tf_config: str, restart_count: int, timeout_s: float | None) -> dict[str, str]:
    """The variables the launcher sets for one task of a ``--ps`` job (merged over the parent's environment)."""
    return _launched_env(timeout_s) | {"TF_CONFIG": tf_config, RESTART_COUNT_ENV: str(restart_count)}


def _launched_env(timeout_s: float | None) -> dict[str, str]:
    env = {LAUNCHED_ENV: "1", "PYTHONUNBUFFERED": "1"}
    if KERAS_BACKEND_ENV not in os.environ:  # Keras 3 would pick TensorFlow in a script that imports keras first
        env[KERAS_BACKEND_ENV] = "torch"
    if timeout_s is not None:
        env["STRATAGEM_TIMEOUT_S"] = f"{timeout_s:g}"
    return env


def ps_cluster_configs(num_workers: int, num_ps: int, *, host: str = "127.0.0.1",
                       ports: list[int] | None = None) -> dict[tuple[str, int], str]:
    """``TF_CONFIG`` for each task of a one-host parameter-server job: chief, workers, servers.

    Ports are free ones on ``host`` unless given (chief first, then workers, then servers).
    """
    import json

    from stratagem.launcher.ports import find_free_ports

    count = 1 + num_workers + num_ps
    ports = list(ports) if ports is not None else find_free_ports(count, host)
    if len(ports) != count:
        raise ValueError(f"Need {count} ports (chief, {num_workers} workers, {num_ps} ps). Received: {len(ports)}")
    cluster = {"chief": [_address(host, ports[0])],
               "worker": [_address(host, p) for p in ports[1 : 1 + num_workers]],
               "ps": [_address(host, p) for p in ports[1 + num_workers :]]}
    tasks = [("chief", 0)] + [("worker", i) for i in range(num_workers)] + [("ps", i) for i in range(num_ps)]
    return {(kind, index): json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})
            for kind, index in tasks}


def local_tf_configs(world_size: int, *, host: str, master_port: int) -> list[str]:
    """``TF_CONFIG`` for each replica of a one-host ``-n N`` job, the same job as ``worker_env`` describes.

    Worker i is rank i and worker 0's address is the rendezvous, so a resolver
    reading ``TF_CONFIG`` finds the group ``RANK``/``WORLD_SIZE``/``MASTER_*``
    name. The other workers' ports are free ones: TF lists an address per task,
    but nothing listens there.
    """
    import json

    from stratagem.launcher.ports import find_free_ports

    # One more than needed, so the rest are distinct from the master port whatever is picked.
    ports = [master_port] + [port for port in find_free_ports(world_size, host) if port != master_port][: world_size - 1]
    cluster = {"worker": [_address(host, port) for port in ports]}
    return [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": rank}}) for rank in range(world_size)]


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
