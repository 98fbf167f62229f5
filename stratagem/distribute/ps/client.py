"""Client side of the parameter servers: one ``PSClient`` per server, ``ShardedVariables`` over all.

Every call carries a deadline. A shard ``i`` of a partitioned variable lives on
server ``i % num_servers``, as TensorFlow places variable shards on ``ps`` tasks.
"""

from __future__ import annotations

from typing import Any

import grpc
import torch

from stratagem.distribute.ps import wire
from stratagem.distribute.ps.partitioners import shard_rows
from stratagem.distribute.ps.server import SERVICE
from stratagem.errors import ParameterServerError


class PSClient:
    """Talks to one parameter server; every call waits at most ``timeout_s``."""

    def __init__(self, address: str, *, timeout_s: float = 30.0) -> None:
        self.address, self.timeout_s = address, timeout_s
        self._channel = grpc.insecure_channel(address)
        self._methods = {name: self._channel.unary_unary(f"/{SERVICE}/{name}") for name in ("Create", "Pull", "Push")}

    def call(self, method: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return self.call_raw(method, wire.encode(tensors, meta))

    def call_raw(self, method: str, message: bytes) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Sends bytes as they are (tests send malformed ones on purpose)."""
        try:
            reply = self._methods[method](message, timeout=self.timeout_s)
        except grpc.RpcError as err:
            code = err.code()  # type: ignore[attr-defined]
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise ParameterServerError(
                    f"Parameter server {self.address} did not answer {method} within {self.timeout_s:g}s "
                    f"({code.name}): it is down or unreachable. Restart it, or resume from the last checkpoint."
                ) from err
            raise ParameterServerError(f"Parameter server {self.address} refused {method}: {err.details()}") from err  # type: ignore[attr-defined]
        return wire.decode(reply)

    def close(self) -> None:
        self._channel.close()


class ShardedVariables:
    """Variables split along axis 0 by a partitioner and spread over several servers.

    Example:
        >>> variables = ShardedVariables(clients, FixedShardsPartitioner(3))  # doctest: +SKIP
        >>> variables.create("embedding", torch.randn(1000, 16), learning_rate=0.1)  # doctest: +SKIP
        >>> variables.push({"embedding": grad}); variables.pull(["embedding"])  # doctest: +SKIP
    """

    def __init__(self, clients: list[PSClient], partitioner: Any) -> None:
        self.clients, self.partitioner = clients, partitioner
        self.layout: dict[str, list[range]] = {}

    def create(self, name: str, value: torch.Tensor, *, learning_rate: float) -> None:
        parts = self.partitioner(tuple(value.shape), value.dtype)[0] if value.ndim else 1
        self.layout[name] = shard_rows(value.shape[0], parts) if value.ndim else [range(0, 1)]
        for shard, rows in enumerate(self.layout[name]):
            piece = value[rows.start : rows.stop] if value.ndim else value
            self._client(shard).call("Create", {_shard_name(name, shard): piece}, {"learning_rate": learning_rate})

    def pull(self, names: list[str]) -> dict[str, torch.Tensor]:
        out = {}
        for name in names:
            pieces = [self._client(s).call("Pull", {}, {"names": [_shard_name(name, s)]})[0][_shard_name(name, s)]
                      for s in range(len(self.layout[name]))]
            out[name] = torch.cat(pieces) if pieces[0].ndim else pieces[0]
        return out

    def push(self, gradients: dict[str, torch.Tensor]) -> None:
        for name, grad in gradients.items():
            for shard, rows in enumerate(self.layout[name]):
                piece = grad[rows.start : rows.stop] if grad.ndim else grad
                self._client(shard).call("Push", {_shard_name(name, shard): piece}, {})

    def _client(self, shard: int) -> PSClient:
        return self.clients[shard % len(self.clients)]


def _shard_name(name: str, shard: int) -> str:
    return f"{name}/part_{shard}"
