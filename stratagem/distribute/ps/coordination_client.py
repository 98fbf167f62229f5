"""A worker's line to the chief's coordination service (gRPC, raw bytes, deadlines).

Registers (``Hello``, waiting for the chief to come up, at most the timeout), heartbeats every second from a thread,
polls for steps and answers, reports results, and says goodbye at exit. The service side is ``coordination``.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import grpc
import torch

from stratagem.distribute.ps import rpc, wire
from stratagem.distribute.ps.auth import Credentials
from stratagem.distribute.ps.coordination import HEARTBEAT_S, METHODS, POLL_WAIT_S, SERVICE
from stratagem.errors import CoordinatorError


class CoordinatorClient:
    """A worker's line to the chief: registers, heartbeats, polls for closures and answers."""

    def __init__(self, address: str, worker: int, *, timeout_s: float, credentials: Credentials | None = None) -> None:
        self.address, self.worker, self.timeout_s = address, worker, timeout_s
        self.incarnation = uuid.uuid4().hex
        self._channel, self._methods = rpc.connect(address, SERVICE, METHODS, credentials)
        hello = self._hello()
        self.step_base, self.num_workers = int(hello["step_base"]), int(hello["num_workers"])
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeats, name="stratagem-heartbeat", daemon=True)
        self._beat.start()

    def poll(self, scheduled: int, wait: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any], bytes]:
        reply = self._call_raw("Poll", wire.encode({}, self._with_id({"scheduled": scheduled, "wait": wait})),
                               timeout=POLL_WAIT_S + self.timeout_s)
        tensors, meta = wire.decode(reply)
        return tensors, meta, reply

    def report(self, closure: int, *, value: bytes | None = None, error: str | None = None) -> None:
        tensors, meta = wire.decode(value) if value is not None else ({}, {})
        meta = self._with_id({"closure": closure, "value": meta.get("value"), "error": error})
        self._call_raw("Report", wire.encode(tensors, meta), timeout=self.timeout_s)

    def close(self) -> None:
        self._stop.set()
        try:
            self._call_raw("Bye", wire.encode({}, self._with_id({})), timeout=5.0)
        except CoordinatorError:
            pass  # the chief is gone already: nothing to say goodbye to
        self._channel.close()

    def _heartbeats(self) -> None:
        message = wire.encode({}, self._with_id({}))
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._methods["Heartbeat"](message, timeout=HEARTBEAT_S * 5)
            except grpc.RpcError:
                pass  # the main thread's next call reports a lost chief, with its deadline

    def _hello(self) -> dict[str, Any]:
        """Registers; the chief may start after its workers, so the call waits for it (gRPC's wait_for_ready)."""
        try:
            reply = self._methods["Hello"](wire.encode({}, self._with_id({})), timeout=self.timeout_s,
                                           wait_for_ready=True)
        except grpc.RpcError as err:
            raise CoordinatorError(
                f"Worker {self.worker} could not reach the chief's coordinator at {self.address} within "
                f"{self.timeout_s:g}s ({err.code().name}). Start the chief, and check its address in "  # type: ignore[attr-defined]
                "TF_CONFIG.") from err
        return wire.decode(reply)[1]

    def _call_raw(self, method: str, message: bytes, *, timeout: float) -> bytes:
        try:
            return self._methods[method](message, timeout=timeout)
        except grpc.RpcError as err:
            raise CoordinatorError(f"Worker {self.worker} lost the chief's coordinator at {self.address} "
                                    f"({err.code().name}: {err.details()}). The chief has stopped or "  # type: ignore[attr-defined]
                                    "is unreachable.") from err

    def _with_id(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {"worker": self.worker, "incarnation": self.incarnation, **meta}
