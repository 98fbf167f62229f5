"""The one loopback test every listener and launcher check uses (``_interfaces.is_loopback``)."""

from __future__ import annotations

import pathlib
import socket

import pytest

from stratagem.distribute import _interfaces
from stratagem.distribute._interfaces import is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "127.3.4.5", "localhost", "::1", "[::1]", " [::1] ",
                                  "::ffff:127.0.0.1", "[::1%lo]"])
def test_loopback_names_and_addresses_are_loopback(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", "198.51.100.7", "[2001:db8::1]", "::ffff:198.51.100.7",
                                  "no-such-host.invalid", "", "[]"])
def test_wildcard_lan_and_unresolvable_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_name_resolving_to_loopback_and_lan_is_not_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    # A name with one address beyond loopback lets other hosts in: it must not pass as loopback.
    both = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("198.51.100.7", 0))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: both)
    assert not is_loopback("mixed.example")


def test_package_defines_is_loopback_once() -> None:
    package = pathlib.Path(_interfaces.__file__).parents[1]
    defining = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
                if "def is_loopback(" in path.read_text(encoding="utf-8")]
    assert defining == ["distribute/_interfaces.py"]
