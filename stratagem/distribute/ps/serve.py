"""Runs one parameter server until SIGTERM or SIGINT: ``python -m stratagem.distribute.ps.serve``.

Reads the address to bind from ``TF_CONFIG`` (task type ``ps``), so a ``ps`` task needs no script; ``stratagem run
--ps P`` starts these, and ``ParameterServerStrategy`` built on a ``ps`` task ends up here. It checks every call's
proof of the job's secret and serves TLS when ``STRATAGEM_TLS_*`` name the files (``auth``); without a secret it
listens on loopback only.
"""

from __future__ import annotations

import signal
import sys
import threading

from stratagem.distribute.cluster import PS, TFConfigClusterResolver
from stratagem.distribute.ps.auth import Credentials
from stratagem.distribute.ps.server import ParameterServer
from stratagem.errors import ConfigurationError


def serve(address: str, *, name: str = "ps", credentials: Credentials | None = None) -> int:
    """Serves on ``address`` until SIGTERM/SIGINT; returns the exit status.

    ``credentials``: default, the job's secret and TLS files from the environment.
    """
    credentials = credentials if credentials is not None else Credentials.from_environ()
    server = ParameterServer(address, credentials=credentials).start()
    print(f"stratagem: {name} serving on {server.address}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    server.stop()
    return 0


def main() -> int:
    resolver = TFConfigClusterResolver()
    if resolver.task_type != PS:
        raise ConfigurationError(
            "stratagem.distribute.ps.serve runs a parameter server, so TF_CONFIG's task.type must be 'ps'. "
            f"Received: task.type={resolver.task_type!r}")
    address = resolver.cluster_spec().task_address(PS, int(resolver.task_id or 0))
    return serve(address, name=f"ps {resolver.task_id}")


if __name__ == "__main__":
    sys.exit(main())
