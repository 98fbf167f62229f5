"""A parameter server: holds variables (or shards of them) and applies pushed gradients.

Transport is gRPC (``grpcio``) with raw-bytes methods carrying the messages of
``stratagem.distribute.ps.wire``; no protocol of our own below it. The server
binds only the address it is given (loopback in every test). A malformed or
mismatched request is answered with ``INVALID_ARGUMENT`` and a message, and
the server goes on serving. Updates are applied as they arrive (asynchronous
training); each applied push increments the variable's version.
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any, NoReturn

import grpc
import torch

from stratagem.distribute.ps import wire

SERVICE = "stratagem.ParameterServer"


class ParameterServer:
    """Serves ``Create``, ``Pull`` and ``Push`` on ``address`` (``host:port``; port 0 picks one).

    Example:
        >>> server = ParameterServer("127.0.0.1:0")  # doctest: +SKIP
        >>> server.start(); print(server.address)  # doctest: +SKIP
    """

    def __init__(self, address: str, *, max_workers: int = 4) -> None:
        self._variables: dict[str, torch.Tensor] = {}
        self._learning_rate: dict[str, float] = {}
        self._versions: dict[str, int] = {}
        self.pushes_applied = 0
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
        handlers = {name: grpc.unary_unary_rpc_method_handler(getattr(self, f"_{name.lower()}"))
                    for name in ("Create", "Pull", "Push")}
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        host = address.rsplit(":", 1)[0]
        port = self._server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"Cannot listen on {address}: the port is taken or the address is not this host's.")
        self.address = f"{host}:{port}"

    def start(self) -> ParameterServer:
        self._server.start()
        return self

    def stop(self, grace_s: float = 1.0) -> None:
        self._server.stop(grace_s).wait(grace_s + 1)

    # ---- methods (bytes in, bytes out) --------------------------------------------
    def _create(self, request: bytes, context: Any) -> bytes:
        tensors, meta = self._decode(request, context)
        rate = meta.get("learning_rate")
        if not isinstance(rate, (int, float)) or isinstance(rate, bool):
            _refuse(context, f"Create needs a numeric meta.learning_rate. Received: {rate!r}")
        with self._lock:
            for name, value in tensors.items():
                self._variables[name] = value.clone()
                self._learning_rate[name] = float(rate)
                self._versions[name] = 0
        return wire.encode({}, {"created": sorted(tensors)})

    def _pull(self, request: bytes, context: Any) -> bytes:
        _, meta = self._decode(request, context)
        names = meta.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            _refuse(context, f"Pull needs meta.names, a list of strings. Received: {names!r}")
        with self._lock:
            self._check_known(names, context)
            values = {name: self._variables[name].clone() for name in names}
            versions = {name: self._versions[name] for name in names}
        return wire.encode(values, {"versions": versions})

    def _push(self, request: bytes, context: Any) -> bytes:
        gradients, _ = self._decode(request, context)
        with self._lock:
            self._check_known(list(gradients), context)
            for name, grad in gradients.items():
                variable = self._variables[name]
                if grad.shape != variable.shape or grad.dtype != variable.dtype:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"Gradient for {name!r} is {grad.dtype}{list(grad.shape)}, but the variable is "
                                  f"{variable.dtype}{list(variable.shape)}")
            for name, grad in gradients.items():  # all checked first: a push applies whole or not at all
                self._variables[name].sub_(grad, alpha=self._learning_rate[name])
                self._versions[name] += 1
            self.pushes_applied += 1
            versions = {name: self._versions[name] for name in gradients}
        return wire.encode({}, {"versions": versions})

    # ---- checks ---------------------------------------------------------------------
    @staticmethod
    def _decode(request: bytes, context: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        try:
            return wire.decode(request)
        except ValueError as err:
            _refuse(context, f"Malformed message: {err}")

    def _check_known(self, names: list[str], context: Any) -> None:
        unknown = [n for n in names if n not in self._variables]
        if unknown:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"Unknown variable(s) {unknown}. This server holds {sorted(self._variables)}.")


def _refuse(context: Any, message: str) -> NoReturn:
    """Answers INVALID_ARGUMENT with ``message``; the server itself goes on serving."""
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
    raise AssertionError("unreachable: grpc's abort raises")
