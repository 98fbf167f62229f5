"""SignedStore: the job's values round-trip; a value without the job's signature is refused, naming the key."""

from __future__ import annotations

import threading

import pytest
import torch.distributed as dist

from stratagem.distribute import job_secret
from stratagem.distribute._rendezvous import SignedStore
from stratagem.errors import ConfigurationError

_KEY = job_secret.derive_key(b"0123456789abcdef0123", "store-signature")
_FORGED = "Another process is writing to this job's rendezvous store"


def _stores() -> tuple[dist.Store, SignedStore]:
    inner = dist.HashStore()
    return inner, SignedStore(inner, key=_KEY, where="rank 0/2, store at 127.0.0.1:1")


def test_values_and_counters_round_trip_signed() -> None:
    inner, store = _stores()
    store.set("stratagem/joined/0", "1")
    assert store.get("stratagem/joined/0") == b"1" and inner.get("stratagem/joined/0") != b"1"
    assert store.check(["stratagem/joined/0"]) and not store.check(["stratagem/joined/1"])
    assert [store.add("n", 2), store.add("n", 3), store.add("n", 0)] == [2, 5, 5]
    assert store.compare_set("c", "", "a") == b"a" and store.compare_set("c", "x", "b") == b"a"
    assert store.compare_set("c", "a", "b") == b"b"
    prefixed = dist.PrefixStore("stratagem/pg", store)  # how gloo reaches it: C++ calling into the wrapper
    prefixed.set("0//cpu//0/1", b"\x00address")
    assert prefixed.get("0//cpu//0/1") == b"\x00address"


def test_concurrent_adds_lose_no_increment() -> None:
    _, store = _stores()

    def add() -> None:
        for _ in range(50):
            store.add("counter", 1)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.add("counter", 0) == 200


@pytest.mark.parametrize("read", ["get", "check", "wait", "add", "through gloo's prefix"])
def test_a_forged_value_is_refused_naming_the_key(read: str) -> None:
    inner, store = _stores()
    inner.set("stratagem/pg/k", "1")  # what a process without the secret writes
    with pytest.raises(ConfigurationError, match=rf"\[rank 0/2, store at 127.0.0.1:1\] {_FORGED}.*'stratagem/pg/k'"):
        if read == "get":
            store.get("stratagem/pg/k")
        elif read == "check":
            store.check(["stratagem/pg/k"])
        elif read == "wait":
            store.wait(["stratagem/pg/k"])
        elif read == "add":
            store.add("stratagem/pg/k", 1)
        else:
            dist.PrefixStore("stratagem/pg", store).get("k")


def test_a_signed_value_copied_to_another_key_or_signed_with_another_secret_is_refused() -> None:
    inner, store = _stores()
    store.set("stratagem/joined/0", "1")
    inner.set("stratagem/joined/1", inner.get("stratagem/joined/0"))  # a replay under rank 1's name
    with pytest.raises(ConfigurationError, match=_FORGED):
        store.get("stratagem/joined/1")
    other = SignedStore(inner, key=job_secret.derive_key(b"another secret, same length", "store-signature"),
                        where="rank 1/2")
    other.set("stratagem/joined/1", "1")  # another job's process, pointed at this job's chief
    with pytest.raises(ConfigurationError, match=_FORGED):
        store.check(["stratagem/joined/0", "stratagem/joined/1"])
