"""The elastic rendezvous's store in one process: torch's handler over our checked backend, signed or not."""

from __future__ import annotations

import base64
import datetime
import os
import pickle
from pathlib import Path

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousConnectionError, RendezvousStateError
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousTimeout,
    _NodeDesc,
    _RendezvousState,
)

from stratagem.distribute._rendezvous import SignedStore
from stratagem.errors import ConfigurationError
from stratagem.launcher._rendezvous_state import CheckedC10dBackend

_KEY = "torch.rendezvous.job"  # where torch's c10d backend keeps run "job"'s state


class _Touch:
    """What a crafted state could do when unpickled: here, create a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.mkdir, (str(self.path),)


def _signed(inner: dist.Store) -> SignedStore:
    return SignedStore(inner, key=b"k" * 32, where="test")


def test_one_host_round_forms_over_a_signed_store_and_real_states_pass_the_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as elastic.py sets: no second store
    store = _signed(dist.HashStore())
    handler = DynamicRendezvousHandler.from_backend(
        "job", store, CheckedC10dBackend(store, "job"), 1, 2, local_addr="127.0.0.1",
        timeout=RendezvousTimeout(join=datetime.timedelta(seconds=20), last_call=datetime.timedelta(seconds=1)),
        keep_alive_interval=1)
    try:
        info = handler.next_rendezvous()
        assert (info.rank, info.world_size) == (0, 1)
        assert info.bootstrap_store_info is not None and info.bootstrap_store_info.master_addr == "127.0.0.1"
        assert handler.num_nodes_waiting() == 0
    finally:
        handler.shutdown()
    # A state with every kind of member torch's handler writes passes the exact check.
    state = _RendezvousState()
    node = _NodeDesc("127.0.0.1", 1, 0)
    state.participants[node], state.wait_list, state.redundancy_list = 0, {_NodeDesc("h", 2, 1)}, {node}
    state.last_heartbeats[node] = state.deadline = datetime.datetime.now(datetime.timezone.utc)
    backend = CheckedC10dBackend(dist.HashStore(), "job")
    assert backend.set_state(pickle.dumps(state)) is not None and backend.get_state() is not None


def test_crafted_state_is_refused_before_torch_unpickles_it(tmp_path: Path) -> None:
    crafted = base64.b64encode(pickle.dumps(_Touch(tmp_path / "ran"))).decode()
    inner = dist.HashStore()
    backend = CheckedC10dBackend(inner, "job")
    inner.set(_KEY, crafted)  # a stranger writes the state directly
    with pytest.raises(RendezvousStateError, match=r"not one torch.s rendezvous wrote.*names posix\.mkdir"):
        backend.get_state()
    assert not (tmp_path / "ran").exists()
    # With the job's secret, the unsigned value is refused by the store before the check.
    signed_inner = dist.HashStore()
    signed = CheckedC10dBackend(_signed(signed_inner), "job")
    signed_inner.set(_KEY, crafted)
    with pytest.raises(RendezvousConnectionError) as caught:
        signed.get_state()
    assert isinstance(caught.value.__cause__, ConfigurationError) and not (tmp_path / "ran").exists()
