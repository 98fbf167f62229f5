"""Only the job's own processes get in: proofs of the job's secret on every parameter-server and coordination call.

In-process servers on loopback; the strangers are clients without the
secret or with another one. Also the coordinator's refusal of calls from
unregistered workers and of reports for steps never handed out (issue 14
item 8), the secret's sources, and TLS with a throwaway self-signed certificate.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import torch

from stratagem.distribute import job_secret
from stratagem.distribute.ps import auth, coordination, rpc, wire
from stratagem.distribute.ps.auth import Credentials
from stratagem.distribute.ps.client import PSClient
from stratagem.distribute.ps.coordination import CoordinatorService
from stratagem.distribute.ps.coordination_client import CoordinatorClient
from stratagem.distribute.ps.server import METHODS, SERVICE, ParameterServer
from stratagem.errors import ConfigurationError, ParameterServerError
from stratagem.launcher.ports import find_free_ports

SECRET = job_secret.generate().encode()
JOB = Credentials.from_secret(SECRET)
STRANGERS = {"no secret": Credentials(), "wrong secret": Credentials.from_secret(job_secret.generate().encode())}
SGD = {"class": "SGD", "hyper": {"lr": 0.5}}


@pytest.fixture
def server() -> Iterator[ParameterServer]:
    server = ParameterServer("127.0.0.1:0", credentials=JOB).start()
    yield server
    server.stop(0)


def _code(err: BaseException) -> grpc.StatusCode:
    cause = err.__cause__
    assert isinstance(cause, grpc.RpcError), f"no gRPC status behind {err!r}"
    return cause.code()  # type: ignore[attr-defined, no-any-return]


def test_strangers_are_refused_every_method_and_change_nothing(server: ParameterServer) -> None:
    job = PSClient(server.address, timeout_s=60, credentials=JOB)
    initial = torch.randn(2, 3)
    job.call("Create", {"w": initial}, {})
    gradient = torch.ones(2, 3)
    job.call("Push", {"w": gradient}, {"optimizer": SGD, "step": 0})
    snapshot = job.call_bytes("Snapshot", wire.encode({}, {}))
    attempts = {
        "Create": wire.encode({"w": torch.zeros(2, 3)}), "Pull": wire.encode({}, {"names": ["w"]}),
        "Push": wire.encode({"w": torch.full((2, 3), 100.0)}, {"optimizer": SGD, "step": 1}),
        "Snapshot": wire.encode({}, {}), "Restore": snapshot, "Stats": wire.encode({}, {}),
    }
    assert set(attempts) == set(METHODS)
    for who, credentials in STRANGERS.items():
        stranger = PSClient(server.address, timeout_s=60, credentials=credentials)
        for method, message in attempts.items():
            with pytest.raises(ParameterServerError, match="Call refused") as caught:
                stranger.call_bytes(method, message)
            assert _code(caught.value) == grpc.StatusCode.UNAUTHENTICATED, (who, method)
    values, meta = job.call("Pull", {}, {"names": ["w"]})
    torch.testing.assert_close(values["w"], initial - 0.5 * gradient, rtol=0, atol=0)
    stats = job.call("Stats", {}, {})[1]
    assert (stats["pushes_applied"], stats["version"], stats["applied_steps"]) == (1, 1, [0])
    assert stats["unauthenticated_refused"] == server.unauthenticated_refused == 2 * len(METHODS)


def test_replayed_expired_or_retargeted_proofs_are_refused(server: ParameterServer) -> None:
    assert JOB.key is not None
    channel, methods = rpc.connect(server.address, SERVICE, METHODS)  # no key: proofs are made by hand below
    create = wire.encode({"w": torch.zeros(3)})
    path = f"/{SERVICE}/Create"
    proof = auth.proof(JOB.key, path, create)
    raw = channel.unary_unary(path)
    raw(create, timeout=10, metadata=((auth.PROOF_METADATA, proof),))  # the job's own call goes through
    refusals = {
        "used before": (create, proof),
        "does not match": (wire.encode({"w": torch.zeros(4)}), auth.proof(JOB.key, path, create)),  # other header
        "away from this host's clock": (create, auth.proof(JOB.key, path, create,
                                                            now_ms=time.time_ns() // 10**6 - 10 * 60 * 1000)),
        "malformed": (create, "v1:abc"),
    }
    for problem, (message, value) in refusals.items():
        with pytest.raises(grpc.RpcError) as caught:
            raw(message, timeout=10, metadata=((auth.PROOF_METADATA, value),))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED and problem in caught.value.details()
    other_method = auth.proof(JOB.key, f"/{SERVICE}/Pull", create)  # a proof for Pull does not open Create
    with pytest.raises(grpc.RpcError, match="does not match"):
        raw(create, timeout=10, metadata=((auth.PROOF_METADATA, other_method),))
    channel.close()
    assert server.unauthenticated_refused == len(refusals) + 1


def test_server_without_secret_refuses_to_listen_beyond_loopback() -> None:
    with pytest.raises(ConfigurationError, match="beyond loopback, without the job's secret"):
        ParameterServer("0.0.0.0:0")


@pytest.fixture
def service() -> Iterator[CoordinatorService]:
    (port,) = find_free_ports(1, "127.0.0.1")
    service = CoordinatorService(f"127.0.0.1:{port}", num_workers=2, step_base=0, worker_timeout_s=30,
                                 credentials=JOB)
    yield service
    service.shutdown(grace_s=0)


def _coordination_call(address: str, credentials: Credentials, method: str, meta: dict) -> tuple[grpc.StatusCode, str]:
    channel, methods = rpc.connect(address, coordination.SERVICE, coordination.METHODS, credentials)
    try:
        methods[method](wire.encode({}, meta), timeout=10)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as err:
        return err.code(), err.details()  # type: ignore[attr-defined]
    finally:
        channel.close()


def test_coordination_refuses_strangers_and_forged_reports(service: CoordinatorService) -> None:
    n = service.schedule("train_step")
    worker = CoordinatorClient(service.address, 0, timeout_s=60, credentials=JOB)
    try:
        report = {"worker": 0, "incarnation": worker.incarnation, "closure": n, "value": 123.0}
        for credentials in STRANGERS.values():
            for method, meta in (("Hello", report), ("Poll", {**report, "scheduled": 1, "wait": {}}),
                                 ("Report", report), ("Heartbeat", report), ("Bye", report)):
                assert _coordination_call(service.address, credentials, method, meta)[0] == \
                    grpc.StatusCode.UNAUTHENTICATED
        # With the secret, but not a registered worker, or not for a step handed to it (issue 14 item 8).
        forged = {"unregistered": {**report, "worker": 1, "incarnation": "stranger"},
                  "never scheduled": {**report, "closure": 7},
                  "scheduled, not handed out": report}
        for case, meta in forged.items():
            code, details = _coordination_call(service.address, JOB, "Report", meta)
            assert code == grpc.StatusCode.FAILED_PRECONDITION, (case, details)
        code, _ = _coordination_call(service.address, JOB, "Poll", {**forged["unregistered"], "scheduled": 1,
                                                                     "wait": {}})
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert not service.done()  # no forged report completed the step
        _, meta, _ = worker.poll(1, {"kind": "value", "index": n})
        assert meta == {"run": n, "function": "train_step"}
        worker.report(n, value=wire.encode({}, {"value": 1.5}))
        assert service.done() and wire.decode(service.wait_result(n, 5))[1]["value"] == 1.5
        assert service.stats()["unauthenticated_refused"] == 2 * 5
    finally:
        worker.close()


def test_secret_comes_from_the_variable_or_a_file(tmp_path: Path) -> None:
    file = tmp_path / "secret"
    file.write_text("0123456789abcdef0123\n")
    assert job_secret.load({job_secret.SECRET_FILE_ENV: str(file)}) == b"0123456789abcdef0123"
    assert job_secret.load({job_secret.SECRET_ENV: "x" * 16}) == b"x" * 16
    assert job_secret.load({}) is None and job_secret.load({job_secret.SECRET_ENV: ""}) is None
    with pytest.raises(ConfigurationError, match="too short"):
        job_secret.load({job_secret.SECRET_ENV: "short"})
    with pytest.raises(ConfigurationError, match="Cannot read the job's secret"):
        job_secret.load({job_secret.SECRET_FILE_ENV: str(tmp_path / "missing")})
    with pytest.raises(ConfigurationError, match="Set only one"):
        job_secret.load({job_secret.SECRET_ENV: "x" * 16, job_secret.SECRET_FILE_ENV: str(file)})
    # A launcher draws a secret for a job it starts whole, and passes the user's on otherwise.
    drawn = job_secret.env_for_job({}, generate_if_missing=True)[job_secret.SECRET_ENV]
    assert len(drawn) == 64 and drawn != job_secret.env_for_job({}, generate_if_missing=True)[job_secret.SECRET_ENV]
    assert job_secret.env_for_job({job_secret.SECRET_FILE_ENV: str(file)}, generate_if_missing=True) == {}
    assert job_secret.env_for_job({}, generate_if_missing=False) == {}
    # The rendezvous store's prefix depends on the secret, so strangers cannot name the job's keys.
    prefixes = {job_secret.store_prefix("127.0.0.1", {job_secret.SECRET_ENV: s}) for s in ("a" * 16, "b" * 16, "")}
    assert len(prefixes) == 3


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI to make a test certificate")
def test_tls_with_a_self_signed_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    files = {auth.TLS_CERT_ENV: str(cert), auth.TLS_KEY_ENV: str(key), auth.TLS_CA_ENV: str(cert)}
    credentials = Credentials.from_environ({job_secret.SECRET_ENV: SECRET.decode(), **files})
    server = ParameterServer("127.0.0.1:0", credentials=credentials).start()
    try:
        client = PSClient(server.address, timeout_s=60, credentials=credentials)
        client.call("Create", {"w": torch.arange(3.0)}, {})
        assert torch.equal(client.call("Pull", {}, {"names": ["w"]})[0]["w"], torch.arange(3.0))
        plain = PSClient(server.address, timeout_s=2, credentials=JOB)  # right secret, no TLS: no connection
        plain._answered = True  # fail at once instead of waiting for the server to come up
        with pytest.raises(ParameterServerError, match="stopped answering|did not answer"):
            plain.call("Pull", {}, {"names": ["w"]})
    finally:
        server.stop(0)
    with pytest.raises(ConfigurationError, match="needs all of"):
        Credentials.from_environ({auth.TLS_CERT_ENV: str(cert)})
