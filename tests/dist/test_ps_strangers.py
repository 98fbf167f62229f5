"""Strangers against a live parameter-server job: every call refused, the training unchanged.

A real job (chief, one worker, one server on loopback, with its own secret)
trains while this test process, which is not part of it, calls every method
of the server and of the chief's coordination service over and over, with no
secret and with a wrong one. Every answer must be ``UNAUTHENTICATED``, and the
job must end exactly as training without strangers does: same weights and
losses as one process, each step applied once. The chief starts its steps only
once every method has been refused (``TEST_START_AFTER``): a job that starts in
a fraction of a second must not end before the strangers reached both services;
and it shuts its service down only after the strangers stopped
(``TEST_EXIT_AFTER``), so no call is cut off (``CANCELLED``) by its exit.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch

from stratagem.distribute import job_secret
from stratagem.distribute.ps import coordination, rpc, server, wire
from stratagem.distribute.ps.auth import Credentials
from stratagem.testing.ps_cluster import LocalPSCluster
from tests.dist.test_parameter_server_training import SCRIPTS, _reference, _wait_for

pytestmark = pytest.mark.dist

STEPS = 20
STRANGERS = {"no secret": Credentials(), "wrong secret": Credentials.from_secret(job_secret.generate().encode())}


def _messages() -> dict[tuple[str, str], bytes]:
    """What a stranger sends: plausible requests for every method of both services."""
    grads = {"m0/0.weight/part_0": torch.full((4, 1, 3, 3), 1e3)}
    identity = {"worker": 0, "incarnation": "stranger"}
    ps = {"Create": wire.encode(grads), "Pull": wire.encode({}, {"names": list(grads)}),
          "Push": wire.encode(grads, {"optimizer": {"class": "SGD", "hyper": {"lr": 1.0}}}),
          "Snapshot": wire.encode({}, {}), "Restore": wire.encode({}, {"version": 0, "optimizers": {}}),
          "Stats": wire.encode({}, {})}
    chief = {"Hello": identity, "Poll": {**identity, "scheduled": STEPS, "wait": {"kind": "join", "index": 0}},
             "Report": {**identity, "closure": STEPS - 1, "value": 0.0}, "Heartbeat": identity, "Bye": identity}
    return {**{(server.SERVICE, m): b for m, b in ps.items()},
            **{(coordination.SERVICE, m): wire.encode({}, meta) for m, meta in chief.items()}}


def _attack(addresses: dict[str, str], stop: threading.Event, codes: Counter, all_refused: Path) -> None:
    """Calls every method of both services with each stranger's credentials until ``stop``.

    Creates ``all_refused`` once each method has been refused at least once.
    """
    messages = _messages()
    channels = {}
    for who, credentials in STRANGERS.items():
        for service, address in addresses.items():
            methods = tuple(m for s, m in messages if s == service)
            channels[(who, service)] = rpc.connect(address, service, methods, credentials)
    while not stop.is_set():
        for (who, service), (_, methods) in channels.items():
            for method, call in methods.items():
                try:
                    call(messages[(service, method)], timeout=5)
                    codes[(service, method, "OK")] += 1
                except grpc.RpcError as err:
                    codes[(service, method, err.code().name)] += 1  # type: ignore[attr-defined]
        if {(s, m) for (s, m, code) in codes if code == "UNAUTHENTICATED"} == set(messages):
            all_refused.touch()
        stop.wait(0.25)  # a steady trickle: the point is refusal, not load on a 2-core test host
    for channel, _ in channels.values():
        channel.close()


@pytest.mark.timeout(120)
def test_strangers_are_refused_and_the_job_trains_as_without_them(tmp_path: Path) -> None:
    out, all_refused, attack_over = tmp_path / "out.json", tmp_path / "all_refused", tmp_path / "attack_over"
    codes: Counter = Counter()
    stop = threading.Event()
    with LocalPSCluster(SCRIPTS / "custom_loop.py", num_workers=1, num_ps=1, log_dir=tmp_path,
                        args=("sgd", str(STEPS), str(out)),
                        env={"TEST_STALENESS": "0", "TEST_START_AFTER": str(all_refused),
                             "TEST_EXIT_AFTER": str(attack_over)}) as cluster:
        addresses = {server.SERVICE: cluster.address("ps", 0), coordination.SERVICE: cluster.address("chief", 0)}
        attacker = threading.Thread(target=_attack, args=(addresses, stop, codes, all_refused), daemon=True)
        attacker.start()
        try:
            _wait_for(out, cluster, 100)  # the chief trained and wrote its results; its service is still up
        finally:
            stop.set()
            attacker.join(30)
            attack_over.touch()
        assert cluster.wait("chief", 0, 60) == 0, cluster.logs()
        assert cluster.wait("worker", 0, 60) == 0, cluster.logs()
    # Every answer was a refusal (or no answer while a service was not up yet), for every method.
    assert {code for (_, _, code) in codes} <= {"UNAUTHENTICATED", "UNAVAILABLE"}, codes
    refused = {(service, method) for (service, method, code) in codes if code == "UNAUTHENTICATED"}
    assert refused == set(_messages()), f"methods never refused while up: {set(_messages()) - refused}"
    # The job trained exactly as one process does, each step applied once, and counted the refusals.
    result = json.loads(out.read_text())
    state, losses = _reference("sgd", STEPS)
    for name, expected in state.items():
        torch.testing.assert_close(torch.tensor(result["state"][name]), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(result["losses"], losses, rtol=0, atol=1e-5)
    (stats,) = result["servers"]
    assert stats["pushes_applied"] == STEPS and stats["applied_steps"] == list(range(STEPS))
    assert stats["unauthenticated_refused"] > 0 and result["coordinator"]["unauthenticated_refused"] > 0
    assert len(result["coordinator"]["ran_by"]) == STEPS
