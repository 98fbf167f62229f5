"""A stranger writing the rendezvous' join keys neither joins a job with a secret nor holds it up.

Rank 1 first acts as a stranger: its own ``TCPStore`` client, without the
secret, writes every key a joining rank writes (``stratagem/joined/N``, its gloo
address in our check and in gloo's own key), under the names stratagem uses with and without the no-secret
prefix; then it waits and joins for real. Rank 0 must not start before that
real join, nor much after it, and the job must compute correctly.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import stratagem
from stratagem.distribute import job_secret
from stratagem.distribute.options import CommunicationOptions
from stratagem.testing import run_workers

pytestmark = pytest.mark.dist

STRANGER_HEAD_START_S = 1.5
# Join keys, our check of gloo's address, and gloo's own key for rank 1's address (seen with list_keys).
FORGED_KEYS = ("stratagem/joined/0", "stratagem/joined/1", "stratagem/gloo_address/1", "stratagem/pg/0//cpu//0/1")


def _worker_with_a_stranger(rank: int, world_size: int) -> dict[str, float | list[str]]:
    forged: list[str] = []
    if rank == 1:
        stranger = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                 timeout=datetime.timedelta(seconds=30))  # waits for rank 0's store
        for prefix in ("", "stratagem-job/"):  # the names in our code, and a no-secret job's prefix
            for key in FORGED_KEYS:
                stranger.set(prefix + key, "192.0.2.1" if "address" in key else "1")
                forged.append(prefix + key)
        time.sleep(STRANGER_HEAD_START_S)  # rank 0 would start now if it believed the forged keys
    joined_at = time.time()
    strategy = stratagem.distribute.MirroredStrategy(
        num_replicas=world_size, communication_options=CommunicationOptions(timeout_seconds=30))
    ready_at = time.time()
    total = strategy.reduce("sum", torch.ones(()) * (rank + 1))
    return {"joined_at": joined_at, "ready_at": ready_at, "total": float(total), "forged": forged}


@pytest.mark.timeout(120)
def test_stranger_writing_join_keys_neither_joins_nor_delays_the_job() -> None:
    chief, worker = run_workers(_worker_with_a_stranger, world_size=2, timeout_s=90,
                                env={job_secret.SECRET_ENV: job_secret.generate()})
    assert len(worker["forged"]) == 2 * len(FORGED_KEYS)
    # Rank 0 waited for rank 1's real join, not the stranger's keys ...
    assert chief["ready_at"] >= worker["joined_at"], (chief, worker)
    # ... and started right after it (a forged gloo address would have held it up until its timeout).
    assert chief["ready_at"] - worker["joined_at"] < 10.0, (chief, worker)
    assert chief["total"] == worker["total"] == 3.0


LISTING_TIMEOUT_S = 20.0


def _stranger_who_lists_the_keys(rank: int, world_size: int) -> dict[str, float | str]:
    # Rank 0 is the job's chief; rank 1 is only a stranger on the machine: it lists the store's keys,
    # finds the prefix, forges rank 1's join, its address and gloo's own address key, and never joins.
    if rank == 1:
        stranger = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                 timeout=datetime.timedelta(seconds=30))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            joined = [key for key in stranger.list_keys() if key.endswith("stratagem/joined/0")]
            if joined:
                break
            time.sleep(0.01)
        prefix = joined[0][: -len("stratagem/joined/0")]
        for key in FORGED_KEYS[1:]:
            stranger.set(prefix + key, "127.0.0.1" if "address" in key else "1")
        stranger.set(prefix + "stratagem/pg/0//cpu//0/1", b"\0" * 16)  # gloo's address of rank 1, garbled
        return {"prefix": prefix}
    return _outcome(lambda: stratagem.distribute.MirroredStrategy(
        num_replicas=world_size, communication_options=CommunicationOptions(timeout_seconds=LISTING_TIMEOUT_S)))


def _outcome(join: Callable[[], object]) -> dict[str, float | str]:
    """What ``join`` raised (empty if nothing) and how long it took."""
    start = time.monotonic()
    try:
        join()
    except Exception as err:  # noqa: BLE001 -- the test looks at what was raised
        return {"error": f"{type(err).__name__}: {err}", "elapsed": time.monotonic() - start}
    return {"error": "", "elapsed": time.monotonic() - start}


@pytest.mark.timeout(120)
def test_stranger_who_lists_the_keys_is_refused_with_a_clear_error() -> None:
    chief, stranger = run_workers(_stranger_who_lists_the_keys, world_size=2, timeout_s=90,
                                  env={job_secret.SECRET_ENV: job_secret.generate()})
    assert stranger["prefix"], stranger  # the keys are listable: the prefix alone keeps nobody out
    # The chief neither joined with the stranger nor waited for its timeout: it names what happened.
    assert chief["error"].startswith("ConfigurationError"), chief
    assert "Another process is writing to this job's rendezvous store" in chief["error"], chief
    assert chief["elapsed"] < LISTING_TIMEOUT_S / 2, chief


def _forged_gloo_address(rank: int, world_size: int, done: str) -> dict[str, float | str]:
    # Rank 1 joins by the rules (signed join and address), then a process without the secret, here
    # rank 1 through the unsigned store beneath, writes gloo's address key of rank 1 before gloo does.
    from stratagem.distribute import _rendezvous, collectives

    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank == 1:
        plain = dist.PrefixStore(job_secret.store_prefix(addr),
                                 _rendezvous.connect_store(rank=1, master_addr=addr, master_port=port, timeout_s=30))
        signed = _rendezvous.SignedStore(plain, key=job_secret.store_signing_key() or b"", where="rank 1")
        _rendezvous.wait_for_ranks(signed, rank=1, world_size=2, timeout_s=30, peers=None)
        _rendezvous.exchange_addresses(signed, rank=1, world_size=2, address="127.0.0.1", master_addr=addr, peers=None)
        plain.set("stratagem/pg/0//cpu//0/1", "forged")
        # Here until the chief has its outcome (DONE), LISTING_TIMEOUT_S / 2 at most: the chief must give up long
        # before (a fixed sleep of that long left the test idle ~9 s).
        deadline = time.monotonic() + LISTING_TIMEOUT_S / 2
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.1)
        return {}
    try:
        return _outcome(lambda: collectives.init_process_group(rank=0, world_size=2, master_addr=addr,
                                                               master_port=port, backend="gloo",
                                                               timeout_s=LISTING_TIMEOUT_S))
    finally:
        Path(done).touch()


@pytest.mark.timeout(120)
def test_forged_gloo_address_is_refused_through_the_signed_store(tmp_path: Path) -> None:
    chief, _ = run_workers(_forged_gloo_address, world_size=2, args=(str(tmp_path / "done"),), timeout_s=90,
                           env={job_secret.SECRET_ENV: job_secret.generate()})
    assert chief["error"].startswith("ConfigurationError: [rank 0/2, store at 127.0.0.1:"), chief
    assert "Another process is writing to this job's rendezvous store" in chief["error"], chief
    assert "key='stratagem/pg/0//cpu//0/1'" in chief["error"], chief
    assert chief["elapsed"] < LISTING_TIMEOUT_S / 2, chief
