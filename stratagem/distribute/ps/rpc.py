"""gRPC plumbing shared by the parameter servers, the chief's coordination service and their clients.

Methods take and return raw bytes (messages of ``wire``); messages may be
large, so gRPC's 4 MB default limit is lifted. A malformed request is
answered ``INVALID_ARGUMENT`` with a message, and the server goes on serving.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any, NoReturn

import grpc
import torch

from stratagem.distribute.ps import wire

# Tensors of any size travel: lift gRPC's 4 MB default in both directions.
OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def start_server(address: str, service: str, handlers: dict[str, Callable[[bytes, Any], bytes]], *,
                 max_workers: int, what: str) -> tuple[Any, int]:
    """A server of ``handlers`` (method name -> bytes handler) bound to ``address`` only, not yet started.

    Returns the server and the bound port.

    Raises:
        OSError: If ``address`` cannot be bound (port taken, or not this host's address).
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), options=OPTIONS)
    methods = {name: grpc.unary_unary_rpc_method_handler(handler) for name, handler in handlers.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, methods),))
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"{what} cannot listen on {address}: the port is taken or the address is not this "
                      "host's. Fix the address (TF_CONFIG's cluster), or free the port.")
    return server, port


def connect(address: str, service: str, methods: tuple[str, ...]) -> tuple[Any, dict[str, Any]]:
    """A channel to ``address`` and a callable per method name."""
    channel = grpc.insecure_channel(address, options=OPTIONS)
    return channel, {name: channel.unary_unary(f"/{service}/{name}") for name in methods}


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
