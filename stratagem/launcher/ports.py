"""Free-port selection on a given address (loopback unless the user names another)."""

from __future__ import annotations

import socket

from stratagem.distribute._interfaces import resolution_error
from stratagem.errors import ConfigurationError


def find_free_port(host: str = "127.0.0.1") -> int:
    """Returns a TCP port that was free on ``host`` a moment ago.

    The port is found by binding port 0 and closing the socket; another
    process could take it before rank 0 binds it, which then fails loudly.
    """
    return find_free_ports(1, host)[0]


def find_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Returns ``count`` distinct TCP ports that were free on ``host`` a moment ago.

    Every socket stays bound until all are picked: binding and closing one at a
    time can hand out the same port twice (two tasks of a job on one address).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets = [socket.socket(family, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            try:
                sock.bind((host, 0))
            except socket.gaierror:
                check_resolvable(host)  # raises the error that names the flag
                raise
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def check_resolvable(host: str, *, flag: str = "--master-addr") -> None:
    """Raises ``ConfigurationError`` naming ``flag`` unless ``host`` resolves to an address."""
    reason = resolution_error(host)
    if reason is not None:
        raise ConfigurationError(
            f"{flag} {host!r} does not resolve to an address ({reason}), so no worker could reach the "
            f"rendezvous. Pass an IP address or a host name this machine resolves. Received: {flag}={host!r}")
