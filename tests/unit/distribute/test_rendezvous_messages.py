"""Rendezvous pieces that need no peers: interface choice, the listener's hints, gloo's errors translated."""

from __future__ import annotations

import os

import pytest

from stratagem.distribute import _interfaces, _rendezvous
from stratagem.distribute.cluster import SimpleClusterResolver, describe_group
from stratagem.errors import CollectiveTimeoutError


def test_loopback_master_picks_the_loopback_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_interfaces.GLOO_IFNAME_ENV, "")  # unset for the test, restored after it
    monkeypatch.delenv(_interfaces.GLOO_IFNAME_ENV)
    name, address = _interfaces.choose_gloo_interface("127.0.0.1")
    assert name.startswith("lo") and address == "127.0.0.1"
    assert os.environ[_interfaces.GLOO_IFNAME_ENV] == name
    assert _interfaces.route_interface("127.0.0.1") == name


def test_interface_set_by_the_user_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_interfaces.GLOO_IFNAME_ENV, "lo")
    assert _interfaces.choose_gloo_interface("10.1.2.3") == ("lo", "127.0.0.1")


def test_unusable_master_address_gets_the_right_hint() -> None:
    with pytest.raises(OSError, match="not one of this host's") as caught:
        _rendezvous.connect_store(rank=0, master_addr="192.0.2.77", master_port=29400, timeout_s=1)
    assert "free port" not in str(caught.value)  # the port is not the problem


def test_master_host_that_does_not_resolve_is_named_as_such() -> None:
    # Issue 21: the chief was told to "Pick a free port"; the other ranks that the chief is not reachable.
    # '.invalid' never resolves (RFC 6761).
    with pytest.raises(OSError, match="the host name does not resolve on this machine") as caught:
        _rendezvous.connect_store(rank=0, master_addr="no-such-host.invalid", master_port=29400, timeout_s=1)
    assert "free port" not in str(caught.value)
    with pytest.raises(CollectiveTimeoutError, match=r"its host name does not resolve from here.*Received: "
                                                     r"master_addr='no-such-host.invalid'"):
        _rendezvous.connect_store(rank=1, master_addr="no-such-host.invalid", master_port=29400, timeout_s=1)


def test_gloo_connect_error_names_the_peer_rank_and_host() -> None:
    peers = describe_group(SimpleClusterResolver({"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, "worker", 0))
    text = ("Gloo connectFullMesh failed with [../pair.cc:152] timed out connecting: SO_ERROR: Connection refused, "
            "remote=[10.0.0.2]:19380\nException raised from ...")
    message = _rendezvous._gloo_failure(text, rank=0, addresses=["10.0.0.1", "10.0.0.2"], peers=peers)
    assert "Could not connect to rank 1 (worker 1 at 10.0.0.2:2222) at 10.0.0.2:19380" in message
    loopback = _rendezvous._gloo_failure(text.replace("10.0.0.2]", "127.0.0.1]"), rank=0,
                                         addresses=["", ""], peers=None)
    assert "a peer at 127.0.0.1:19380" in loopback and "advertised a loopback address" in loopback
    assert "GLOO_SOCKET_IFNAME" in message and "Exception raised from" not in message


def test_missing_rank_is_named_with_its_address() -> None:
    peers = ["chief 0 at h0:1", "worker 0 at h1:1", "worker 1 at 10.9.9.9:2222"]
    err = _rendezvous._missing_error([2], rank=1, world_size=3, timeout_s=5, peers=peers)
    assert "rank 2 (worker 1 at 10.9.9.9:2222)" in str(err) and "Received: missing_ranks=[2]" in str(err)
