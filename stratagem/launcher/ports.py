"""Free-port selection on a given address (loopback unless the user names another)."""

from __future__ import annotations

import socket


def find_free_port(host: str = "127.0.0.1") -> int:
    """Returns a TCP port that was free on ``host`` a moment ago.

    The port is found by binding port 0 and closing the socket; another
    process could take it before rank 0 binds it, which then fails loudly.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
