"""Client side of the parameter servers: one ``PSClient`` per server, ``ShardedVariables`` over all.

Every call has a deadline. Variables go round-robin, as TF places them: the ``k``-th variable's shard ``i`` lives on
server ``(k + i) % num_servers``, so every process running the same script computes the same layout without asking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import torch

from stratagem.distribute.ps import rpc, wire
from stratagem.distribute.ps.auth import Credentials
from stratagem.distribute.ps.partitioners import Partitioner, shard_rows
from stratagem.distribute.ps.server import METHODS, SERVICE
from stratagem.errors import ParameterServerError

Message = tuple[dict[str, torch.Tensor], dict[str, Any]]


class PSClient:
    """Talks to one parameter server; every call waits at most ``timeout_s`` and proves ``credentials``' key."""

    def __init__(self, address: str, *, timeout_s: float = 30.0, name: str | None = None,
                 credentials: Credentials | None = None) -> None:
        self.address, self.timeout_s = address, timeout_s
        self.name = name or address
        self._channel, self._methods = rpc.connect(address, SERVICE, METHODS, credentials)
        # Until the server first answers, calls wait for it to come up (tasks start in any order); after that, a
        # server that is gone fails fast.
        self._answered = False

    def call(self, method: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> Message:
        return self.call_raw(method, wire.encode(tensors, meta))

    def call_raw(self, method: str, message: bytes) -> Message:
        """Sends bytes as they are (tests send malformed ones on purpose)."""
        return wire.decode(self.call_bytes(method, message))

    def call_bytes(self, method: str, message: bytes) -> bytes:
        """Sends bytes, returns the reply's bytes undecoded (snapshots are stored as they come)."""
        return self.send(method, message)()

    def send(self, method: str, message: bytes) -> Callable[[], bytes]:
        """Starts a call and returns what waits for its reply: calls to several servers overlap."""
        future = self._methods[method].future(message, timeout=self.timeout_s, wait_for_ready=not self._answered)

        def reply() -> bytes:
            try:
                data = future.result()
            except grpc.RpcError as err:
                raise self._error(method, err) from err
            self._answered = True
            return data  # type: ignore[no-any-return]

        return reply

    def _error(self, method: str, err: Any) -> ParameterServerError:
        code = err.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            what = (f"stopped answering ({code.name} on {method})" if self._answered else
                    f"did not answer {method} within {self.timeout_s:g}s ({code.name})")
            return ParameterServerError(
                f"Parameter server {self.name} {what}: it is down or unreachable. Restart it, or resume "
                "the job from its last checkpoint (BackupAndRestore).")
        return ParameterServerError(f"Parameter server {self.name} refused {method}: {err.details()}")

    def close(self) -> None:
        self._channel.close()


class ShardedVariables:
    """Variables split along axis 0 by a partitioner and spread over several servers.

    Example:
        >>> variables = ShardedVariables(clients, FixedShardsPartitioner(3))  # doctest: +SKIP
        >>> variables.create({"embedding": torch.randn(1000, 16)})  # doctest: +SKIP
        >>> values, versions = variables.pull(["embedding"])  # doctest: +SKIP
    """

    def __init__(self, clients: list[PSClient], partitioner: Partitioner | None = None) -> None:
        if not clients:
            raise ValueError("ShardedVariables needs at least one parameter server client")
        self.clients, self.partitioner = clients, partitioner
        self.layout: dict[str, list[range]] = {}
        self._first_server: dict[str, int] = {}
        self._scalar: set[str] = set()

    def place(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        """Records where ``name``'s shards live (no call): from its shape and the partitioner."""
        self._first_server.setdefault(name, len(self._first_server) % len(self.clients))
        if not shape:
            self.layout[name] = [range(0, 1)]
            self._scalar.add(name)
            return
        parts = self.partitioner(tuple(shape), dtype)[0] if self.partitioner is not None else 1
        self.layout[name] = shard_rows(shape[0], parts)

    def create(self, values: dict[str, torch.Tensor]) -> None:
        """Places each variable and sends its shards (the chief's values) to their servers."""
        for name, value in values.items():
            self.place(name, tuple(value.shape), value.dtype)
        per_server = self._split(values)
        for server, tensors in per_server.items():
            self.clients[server].call("Create", tensors, {})

    def pull(self, names: list[str]) -> tuple[dict[str, torch.Tensor], dict[int, int]]:
        """Current values of ``names`` (shards joined), and each server's version at the pull."""
        wanted: dict[int, list[str]] = {}
        for name in names:
            for shard in range(len(self.layout[name])):
                wanted.setdefault(self._server(name, shard), []).append(shard_name(name, shard))
        pieces: dict[str, torch.Tensor] = {}
        versions: dict[int, int] = {}
        pending = {server: self.clients[server].send("Pull", wire.encode({}, {"names": shard_names}))
                   for server, shard_names in wanted.items()}
        for server, reply in pending.items():
            tensors, meta = wire.decode(reply())
            pieces.update(tensors)
            versions[server] = int(meta["version"])
        out = {}
        for name in names:
            parts = [pieces[shard_name(name, s)] for s in range(len(self.layout[name]))]
            out[name] = parts[0] if name in self._scalar else torch.cat(parts)
        return out, versions

    def push(self, gradients: dict[str, torch.Tensor], meta: dict[str, Any],
             base_versions: dict[int, int] | None = None) -> dict[int, dict[str, Any]]:
        """Sends each server its shards' gradients in one push; returns each server's reply meta."""
        pending = {}
        for server, tensors in self._split(gradients).items():
            server_meta = dict(meta)
            if base_versions is not None and server in base_versions:
                server_meta["base_version"] = base_versions[server]
            pending[server] = self.clients[server].send("Push", wire.encode(tensors, server_meta))
        return {server: wire.decode(reply())[1] for server, reply in pending.items()}

    def wait_until_created(self, names: list[str], timeout_s: float) -> None:
        """Polls until every shard of ``names`` exists (workers wait for the chief to create them)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.pull(names)
                return
            except ParameterServerError as err:
                if "Unknown variable" not in str(err) or time.monotonic() > deadline:
                    if "Unknown variable" in str(err):
                        raise ParameterServerError(
                            f"The chief did not create the variables within {timeout_s:g}s ({err}). Is the chief "
                            "running the same script, and did it build the model?") from err
                    raise
            time.sleep(0.05)

    def _split(self, tensors: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
        per_server: dict[int, dict[str, torch.Tensor]] = {}
        for name, tensor in tensors.items():
            for shard, rows in enumerate(self.layout[name]):
                piece = tensor if name in self._scalar else tensor[rows.start : rows.stop]
                per_server.setdefault(self._server(name, shard), {})[shard_name(name, shard)] = piece
        return per_server

    def _server(self, name: str, shard: int) -> int:
        return (self._first_server[name] + shard) % len(self.clients)


def shard_name(name: str, shard: int) -> str:
    return f"{name}/part_{shard}"
