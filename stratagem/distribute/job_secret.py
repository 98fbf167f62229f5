"""The job's secret: what lets a job's own processes in and keeps every other process out.

``stratagem run`` draws one per job and hands it to every process in ``STRATAGEM_JOB_SECRET``; a job started by hand
gives every process the same one, there or in a file named by ``STRATAGEM_JOB_SECRET_FILE`` (readable by the job's
user only). Each service derives its own key (``derive_key``): the parameter servers and the coordination service
check an HMAC of every call (``ps.auth``); the rendezvous store keeps the job's keys under a derived prefix and
signs every value (``_rendezvous.SignedStore``). Without a secret nothing is authenticated, so servers refuse to
listen beyond loopback.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import warnings
from collections.abc import Mapping

from stratagem.distribute._interfaces import is_loopback
from stratagem.errors import ConfigurationError

SECRET_ENV = "STRATAGEM_JOB_SECRET"
SECRET_FILE_ENV = "STRATAGEM_JOB_SECRET_FILE"
# 16 characters of token_hex is 64 bits: below that a secret could be guessed by trying.
MIN_SECRET_CHARS = 16


def generate() -> str:
    """A fresh secret for one job: 256 random bits as hex."""
    return secrets.token_hex(32)


def load(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The job's secret from ``STRATAGEM_JOB_SECRET`` or the file ``STRATAGEM_JOB_SECRET_FILE`` names.

    Returns ``None`` when neither is set (or the variable is empty): the job runs without authentication.

    Raises:
        ConfigurationError: If both are set, the file cannot be read, or the secret is shorter than 16 characters.
    """
    environ = os.environ if environ is None else environ
    value, path = environ.get(SECRET_ENV, ""), environ.get(SECRET_FILE_ENV, "")
    if value and path:
        raise ConfigurationError(
            f"Both {SECRET_ENV} and {SECRET_FILE_ENV} are set, so it is unclear which secret the job uses. "
            f"Set only one. Received: {SECRET_FILE_ENV}={path!r}")
    if path:
        try:
            with open(path, encoding="utf-8") as file:
                value = file.read().strip()
        except OSError as err:
            raise ConfigurationError(
                f"Cannot read the job's secret from {SECRET_FILE_ENV}: {err.strerror}. Give every process of the "
                f"job a readable file holding the same secret (e.g. `python -c \"import secrets; "
                f"print(secrets.token_hex(32))\"`). Received: {SECRET_FILE_ENV}={path!r}") from err
    if not value:
        return None
    if len(value) < MIN_SECRET_CHARS:
        where = SECRET_FILE_ENV if path else SECRET_ENV
        raise ConfigurationError(
            f"The job's secret is too short to keep strangers out: at least {MIN_SECRET_CHARS} characters are "
            f"needed. Use `python -c \"import secrets; print(secrets.token_hex(32))\"`. "
            f"Received: {len(value)} characters in {where}")
    return value.encode("utf-8")


def env_for_job(environ: Mapping[str, str], *, generate_if_missing: bool) -> dict[str, str]:
    """What a launcher adds to its children's environment so they share one secret.

    A secret the user set is inherited; otherwise a fresh one with ``generate_if_missing`` (this launcher starts every
    process of the job), else nothing: processes on other hosts could not know a secret drawn here.
    """
    if environ.get(SECRET_ENV) or environ.get(SECRET_FILE_ENV) or not generate_if_missing:
        return {}
    return {SECRET_ENV: generate()}


def derive_key(secret: bytes, purpose: str) -> bytes:
    """A key for one use (``"grpc"``, ``"store"``) derived from the secret, so no two uses share one."""
    return hmac.new(secret, f"stratagem/{purpose}".encode(), hashlib.sha256).digest()


def store_prefix(master_addr: str, environ: Mapping[str, str] | None = None) -> str:
    """The prefix of every key the job keeps in its rendezvous store (a ``PrefixStore``).

    Derived from the secret, so a process without it writing the keys the job reads by their names writes other keys.
    A stranger reaching the port can still list the keys and find the prefix, so with a secret every value is also
    signed (``store_signing_key``). Without a secret the prefix is fixed and a store beyond loopback gets a warning.
    """
    secret = load(environ)
    if secret is None:
        if not is_loopback(master_addr):
            warnings.warn(
                f"The rendezvous at {master_addr} listens beyond loopback and the job has no secret, so any process "
                f"that reaches the port can write the keys the job reads. Give every process the same "
                f"{SECRET_ENV} (or {SECRET_FILE_ENV}); `stratagem run` on one host sets one itself.", stacklevel=3)
        return "stratagem-job"
    return "stratagem-job-" + derive_key(secret, "store")[:16].hex()


def store_signing_key(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The key that signs every value the job writes to its rendezvous store; None without a secret."""
    secret = load(environ)
    return None if secret is None else derive_key(secret, "store-signature")

