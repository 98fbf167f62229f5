"""Who may call a parameter server or the chief's coordination service: proofs of the job's secret, and TLS.

Every call carries in its gRPC metadata ``v1:<milliseconds>:<nonce>:<mac>``, an HMAC-SHA256 under a key derived from
the job's secret (``job_secret``) of the method's path, the time, a nonce, the request's length and its ``wire``
header (every tensor's name, dtype and shape, and the meta). A server checks it before it decodes anything
(``Guard``): a missing or invalid proof, one older than ``MAX_CLOCK_SKEW_S``, or a replayed nonce is answered
``UNAUTHENTICATED`` and counted. NOTE: the tensor bytes are not hashed: hashing them costs a large share of a step's
time, and guards only against an attacker who reads the traffic and races a forged copy, which is TLS's to stop
(``STRATAGEM_TLS_CERT`` / ``_KEY`` / ``_CA``). The secret lives in ``job_secret``, servers and channels in ``rpc``.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from stratagem.distribute import job_secret
from stratagem.distribute.ps import wire
from stratagem.errors import ConfigurationError

PROOF_METADATA = "x-stratagem-proof"
# Hosts' clocks may differ (NTP keeps them far closer); a proof older than this is refused.
MAX_CLOCK_SKEW_S = 120.0
TLS_CERT_ENV, TLS_KEY_ENV, TLS_CA_ENV = "STRATAGEM_TLS_CERT", "STRATAGEM_TLS_KEY", "STRATAGEM_TLS_CA"


@dataclass(frozen=True)
class Credentials:
    """What a process proves itself with (``key``, from the job's secret) and its TLS files, if any.

    Args:
        key: HMAC key of the gRPC calls; ``None``: calls are not authenticated.
        tls_cert, tls_key: PEM certificate chain and private key a server presents.
        tls_ca: PEM root certificates a client trusts.
    """

    key: bytes | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    tls_ca: bytes | None = None

    @classmethod
    def from_secret(cls, secret: bytes | None) -> Credentials:
        return cls(key=job_secret.derive_key(secret, "grpc") if secret is not None else None)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Credentials:
        """The job's secret (``job_secret.load``) and TLS files named by ``STRATAGEM_TLS_*``.

        Raises:
            ConfigurationError: If only some of the three TLS variables are set,
                a file cannot be read, or the secret is malformed.
        """
        environ = os.environ if environ is None else environ
        secret = job_secret.load(environ)
        names = (TLS_CERT_ENV, TLS_KEY_ENV, TLS_CA_ENV)
        given = [name for name in names if environ.get(name)]
        if not given:
            return cls.from_secret(secret)
        if len(given) != len(names):
            missing = [name for name in names if name not in given]
            raise ConfigurationError(
                f"TLS for the parameter servers needs all of {', '.join(names)} (every task serves or calls, so "
                f"each needs its certificate, its key and the CA that signed the others'). Set {missing} too, or "
                f"unset {given}. Received: {given} set")
        files = [_read(environ[name], name) for name in names]
        return cls(cls.from_secret(secret).key, *files)

    def server_credentials(self) -> Any:
        """``grpc.ssl_server_credentials`` of the TLS files, or ``None`` (plain TCP)."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        return grpc.ssl_server_credentials([(self.tls_key, self.tls_cert)])

    def channel_credentials(self) -> Any:
        """``grpc.ssl_channel_credentials`` trusting the CA file, or ``None`` (plain TCP)."""
        return grpc.ssl_channel_credentials(root_certificates=self.tls_ca) if self.tls_ca is not None else None


def _read(path: str, name: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as err:
        raise ConfigurationError(f"Cannot read {name}: {err.strerror}. Point it at a readable PEM file. "
                                 f"Received: {name}={path!r}") from err


def proof(key: bytes, method: str, request: bytes, *, now_ms: int | None = None, nonce: str | None = None) -> str:
    """The metadata value that lets ``request`` to ``method`` (``/service/Name``) in."""
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    nonce = secrets.token_hex(12) if nonce is None else nonce
    return f"v1:{now_ms}:{nonce}:{_mac(key, method, now_ms, nonce, request)}"


def _mac(key: bytes, method: str, now_ms: int, nonce: str, request: bytes) -> str:
    mac = hmac.new(key, f"{method}\n{now_ms}\n{nonce}\n{len(request)}\n".encode(), hashlib.sha256)
    mac.update(memoryview(request)[: wire.header_end(request)])  # the header, without copying
    return mac.hexdigest()


class Guard:
    """Checks the proof of every call to one server; counts the calls it refused."""

    def __init__(self, key: bytes | None) -> None:
        self._key = key
        self.refused = 0
        # nonce -> when a proof carrying it could no longer pass the clock check (monotonic); in
        # insertion order, which is expiry order, so pruning pops from the front.
        self._seen: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._key is not None

    def check(self, method: str, request: bytes, context: Any) -> None:
        """Returns when the call may proceed; otherwise answers ``UNAUTHENTICATED`` (which raises)."""
        if self._key is None:
            return
        value = next((v for k, v in context.invocation_metadata() if k == PROOF_METADATA), None)
        problem = self._problem(method, request, value)
        if problem is None:
            return
        with self._lock:
            self.refused += 1
        context.abort(grpc.StatusCode.UNAUTHENTICATED,
                      f"Call refused: {problem}. Only the job's own processes may call; give this process the "
                      f"job's secret ({job_secret.SECRET_ENV} or {job_secret.SECRET_FILE_ENV}).")
        raise AssertionError("unreachable: grpc's abort raises")

    def _problem(self, method: str, request: bytes, value: Any) -> str | None:
        assert self._key is not None
        if value is None:
            return "it carries no proof of the job's secret"
        parts = value.split(":") if isinstance(value, str) else []
        if len(parts) != 4 or parts[0] != "v1" or not parts[1].isdigit():
            return "its proof is malformed"
        now_ms, nonce, mac = int(parts[1]), parts[2], parts[3]
        if abs(time.time() - now_ms / 1000) > MAX_CLOCK_SKEW_S:
            return f"its proof is more than {MAX_CLOCK_SKEW_S:g}s away from this host's clock (a replay, or skewed clocks)"
        if not hmac.compare_digest(mac, _mac(self._key, method, now_ms, nonce, request)):
            return "its proof does not match the job's secret"
        with self._lock:  # only proven calls reach the cache: strangers cannot fill it
            now = time.monotonic()
            while self._seen and next(iter(self._seen.values())) <= now:
                self._seen.popitem(last=False)
            if nonce in self._seen:
                return "its proof was used before (a replay)"
            # A proof passes the clock check for up to 2 x the skew after it arrives (its sender's clock ahead).
            self._seen[nonce] = now + 2 * MAX_CLOCK_SKEW_S
        return None


class SignedMethod:
    """A client's unary method whose every call carries a proof (when the credentials hold a key)."""

    def __init__(self, method: Any, path: str, key: bytes | None) -> None:
        self._method, self._path, self._key = method, path, key

    def __call__(self, request: bytes, **kwargs: Any) -> Any:
        return self._method(request, metadata=self._metadata(request), **kwargs)

    def future(self, request: bytes, **kwargs: Any) -> Any:
        return self._method.future(request, metadata=self._metadata(request), **kwargs)

    def _metadata(self, request: bytes) -> tuple[tuple[str, str], ...] | None:
        return None if self._key is None else ((PROOF_METADATA, proof(self._key, self._path, request)),)
