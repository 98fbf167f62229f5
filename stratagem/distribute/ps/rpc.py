"""gRPC plumbing shared by the parameter servers, the chief's coordination service and their clients.

Methods take and return raw bytes (messages of ``wire``); messages may be large, so gRPC's 4 MB default limit is
lifted. Every call's proof of the job's secret is checked before its bytes are decoded (``auth.Guard``); a server
without a secret listens on loopback only. A malformed request is answered ``INVALID_ARGUMENT`` with a message, and
the server goes on serving.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any, NoReturn

import grpc
import torch

from stratagem.distribute import job_secret
from stratagem.distribute._interfaces import is_loopback
from stratagem.distribute.ps import wire
from stratagem.distribute.ps.auth import Credentials, Guard, SignedMethod
from stratagem.errors import ConfigurationError

# Tensors of any size travel: lift gRPC's 4 MB default in both directions.
OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def start_server(address: str, service: str, handlers: dict[str, Callable[[bytes, Any], bytes]], *,
                 max_workers: int, what: str, credentials: Credentials | None = None) -> tuple[Any, int, Guard]:
    """A server of ``handlers`` (method name -> bytes handler) bound to ``address`` only, not yet started.

    Every handler runs only after ``credentials``' key proved the call (none: calls are not checked). Returns the
    server, the bound port and the guard (its ``refused`` counts the calls turned away).

    Raises:
        ConfigurationError: If ``address`` is not loopback and there is no job secret.
        OSError: If ``address`` cannot be bound (port taken, or not this host's address).
    """
    credentials = credentials or Credentials()
    host = address.rsplit(":", 1)[0]
    if credentials.key is None and not is_loopback(host):
        # NOTE: without a secret anyone who reaches the port could change the model; loopback at least keeps other
        # hosts out.
        raise ConfigurationError(
            f"{what} would listen on {address}, beyond loopback, without the job's secret, so anyone who can "
            f"reach the port could change the model. Give every process of the job the same secret in "
            f"{job_secret.SECRET_ENV} or a file named by {job_secret.SECRET_FILE_ENV} (`stratagem run` sets one "
            f"itself on one host). Received: address={address!r}, secret=None")
    guard = Guard(credentials.key)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), options=OPTIONS)
    methods = {name: grpc.unary_unary_rpc_method_handler(_guarded(guard, f"/{service}/{name}", handler))
               for name, handler in handlers.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, methods),))
    tls = credentials.server_credentials()
    port = server.add_secure_port(address, tls) if tls is not None else server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"{what} cannot listen on {address}: the port is taken or the address is not this "
                      "host's. Fix the address (TF_CONFIG's cluster), or free the port.")
    return server, port, guard


def _guarded(guard: Guard, path: str, handler: Callable[[bytes, Any], bytes]) -> Callable[[bytes, Any], bytes]:
    if not guard.enabled:
        return handler

    def checked(request: bytes, context: Any) -> bytes:
        guard.check(path, request, context)  # before anything is decoded
        return handler(request, context)

    return checked


def connect(address: str, service: str, methods: tuple[str, ...],
            credentials: Credentials | None = None) -> tuple[Any, dict[str, SignedMethod]]:
    """A channel to ``address`` and a callable per method name; each call carries a proof of the secret."""
    credentials = credentials or Credentials()
    tls = credentials.channel_credentials()
    channel = (grpc.secure_channel(address, tls, options=OPTIONS) if tls is not None
               else grpc.insecure_channel(address, options=OPTIONS))
    paths = {name: f"/{service}/{name}" for name in methods}
    return channel, {name: SignedMethod(channel.unary_unary(path), path, credentials.key) for name, path in paths.items()}


def decode(request: bytes, context: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The request's tensors and meta; a malformed request is refused, naming the problem."""
    try:
        return wire.decode(request)
    except ValueError as err:
        refuse(context, f"Malformed message: {err}")


def refuse(context: Any, message: str) -> NoReturn:
    """Answers INVALID_ARGUMENT with ``message``; the server itself goes on serving."""
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
    raise AssertionError("unreachable: grpc's abort raises")
