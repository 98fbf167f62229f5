"""How the ranks of a job meet: the store on the chief, the join barrier, and the backend's own setup.

Each step is bounded by the job's timeout, and each failure names the rank (and host) to look at: the unreachable
chief, the ranks that never joined, the peer gloo could not connect to. Ranks post failures to the store, so none
blames the chief for a peer the chief already knows is missing. Entry point: ``collectives.init_process_group``.
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import hmac
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence

import torch.distributed as dist

from stratagem.distribute._interfaces import GLOO_IFNAME_ENV, is_loopback, resolution_error
from stratagem.errors import CollectiveTimeoutError, ConfigurationError

_JOIN_KEY = "stratagem/joined/{rank}"
_ADDRESS_KEY = "stratagem/gloo_address/{rank}"
_MISSING_KEY = "stratagem/rendezvous/missing"
_MISSING_SEEN_KEY = "stratagem/rendezvous/missing_seen"
_SETUP_FAILED_KEY = "stratagem/backend_setup/failed"
_NOTICE_S = 2.0  # how long the chief stays up so the others read why the job cannot start
_StoreErrors = (RuntimeError, dist.DistError)
_FORGED = "Another process is writing to this job's rendezvous store"  # SignedStore's refusal


def describe(rank: int, peers: Sequence[str] | None) -> str:
    """'rank 2 (worker 1 at h2:2222)' when the cluster names its tasks, else 'rank 2'."""
    return f"rank {rank} ({peers[rank]})" if peers and rank < len(peers) else f"rank {rank}"


def connect_store(*, rank: int, master_addr: str, master_port: int, timeout_s: float) -> dist.TCPStore:
    """Serves the store on rank 0 (bound to ``master_addr`` only); connects to it elsewhere."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if rank == 0:
        listener = _bind_listener(master_addr, master_port)
        return dist.TCPStore(master_addr, master_port, is_master=True, timeout=timeout,
                             wait_for_workers=False, master_listen_fd=listener.detach())
    # NOTE: torch's client retries for `timeout` and then tries once more; a deadline of half the timeout per try
    # keeps a chief that never started at about 1x the timeout.
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            try_timeout = datetime.timedelta(seconds=max(0.5, min(timeout_s / 2, deadline - time.monotonic())))
            return dist.TCPStore(master_addr, master_port, is_master=False, timeout=try_timeout)
        except _StoreErrors as err:
            if time.monotonic() + 0.5 < deadline:
                time.sleep(0.2)
                continue
            unresolved = resolution_error(master_addr)
            why = (f"its host name does not resolve from here ({unresolved}). Check the spelling of the host in "
                   "MASTER_ADDR (or TF_CONFIG), and that this host's DNS or /etc/hosts knows it"
                   if unresolved else "it did not start, died, or is not reachable from here. Check that rank 0 "
                   "is running and that MASTER_ADDR/MASTER_PORT (or TF_CONFIG) name it")
            # `from None`: torch's message carries a C++ stack trace that says no more than this.
            raise CollectiveTimeoutError(
                f"[rank {rank}] Could not reach the chief (rank 0) at {master_addr}:{master_port} within "
                f"{timeout_s:g}s: {why}. "
                f"Received: master_addr={master_addr!r}, master_port={master_port}, timeout_s={timeout_s:g}",
                operation="rendezvous", rank=rank, timeout_s=timeout_s,
            ) from None


class SignedStore(dist.Store):
    """A store whose every value is signed with the job's key and checked on read (HMAC-SHA256).

    torch's ``TCPStore`` authenticates nobody, and anyone who reaches its port can list its keys. Over this wrapper a
    value written without the job's secret (a stranger, or another job pointed at this chief) is refused with a
    ``ConfigurationError`` instead of being taken for a rank's join or address. Every key the job reads goes through
    it. A signature binds the key, so a value copied to another key is refused; counters (``add``) are signed values
    updated by ``compare_set``, each with a nonce so two writers of one number never write the same bytes.

    Args:
        inner: The store to wrap (the job's ``PrefixStore`` over the chief's ``TCPStore``).
        key: The signing key, ``job_secret.derive_key(secret, "store")``.
        where: Who this process is and which store it talks to, for messages ("rank 1, store at h:p").
    """

    _MAGIC = b"stratagem-signed/1\0"
    _NONCE_BYTES = 16

    def __init__(self, inner: dist.Store, *, key: bytes, where: str) -> None:
        super().__init__()
        self._inner, self._key, self._where = inner, key, where

    @property
    def timeout(self) -> datetime.timedelta:  # the wrapped store's: the job's timeout
        return self._inner.timeout  # type: ignore[attr-defined]  # torch's stub lacks the store's property

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._inner.set_timeout(timeout)

    def set(self, key: str, value: str | bytes) -> None:
        # torch's stubs type store values as str; the store takes bytes, which signed values are.
        sealed = self._seal(key, value if isinstance(value, bytes) else value.encode())
        self._inner.set(key, sealed)  # type: ignore[arg-type]

    def get(self, key: str) -> bytes:
        return self._open(key, self._inner.get(key))

    def check(self, keys: list[str]) -> bool:
        if not self._inner.check(keys):
            return False
        for key in keys:  # a key present but forged is not a key this job wrote
            self.get(key)
        return True

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        if timeout is None:
            self._inner.wait(keys)
        else:
            self._inner.wait(keys, timeout)
        for key in keys:
            self.get(key)

    def add(self, key: str, amount: int) -> int:
        while True:
            current = self._inner.get(key) if self._inner.check([key]) else b""
            value = int(self._open(key, current)) + amount if current else amount
            sealed = self._seal(key, str(value).encode())
            if self._inner.compare_set(key, current, sealed) == sealed:  # type: ignore[arg-type]
                return value

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        expected = expected if isinstance(expected, bytes) else expected.encode()
        current = self._inner.get(key) if self._inner.check([key]) else b""
        if (self._open(key, current) if current else b"") != expected:
            return self._open(key, current) if current else expected
        sealed = self._seal(key, desired if isinstance(desired, bytes) else desired.encode())
        return self._open(key, self._inner.compare_set(key, current, sealed))  # type: ignore[arg-type]

    def delete_key(self, key: str) -> bool:
        return self._inner.delete_key(key)

    def num_keys(self) -> int:
        return self._inner.num_keys()

    def _seal(self, key: str, value: bytes) -> bytes:
        nonce = secrets.token_bytes(self._NONCE_BYTES)
        return self._MAGIC + nonce + self._mac(key, nonce, value) + value

    def _open(self, key: str, sealed: bytes) -> bytes:
        head = len(self._MAGIC) + self._NONCE_BYTES
        nonce, mac, value = sealed[len(self._MAGIC):head], sealed[head:head + 32], sealed[head + 32:]
        if not sealed.startswith(self._MAGIC) or not hmac.compare_digest(mac, self._mac(key, nonce, value)):
            raise ConfigurationError(
                f"[{self._where}] {_FORGED}: the key {key!r} holds "
                "a value not signed with the job's secret, so it was not taken for a rank's. It comes from a "
                "process of another job whose MASTER_ADDR/MASTER_PORT (or TF_CONFIG) name this job's chief, a "
                "rank started with another STRATAGEM_JOB_SECRET, or a stranger that reaches the port. Give "
                "every process of the job the same secret and the other job its own port, and keep the port on "
                f"a network only the job's hosts reach. Received: key={key!r}, value={sealed[:40]!r}")
        return value

    def _mac(self, key: str, nonce: bytes, value: bytes) -> bytes:
        encoded = key.encode()
        message = len(encoded).to_bytes(4, "big") + encoded + nonce + value
        return hmac.new(self._key, message, hashlib.sha256).digest()


def _bind_listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        if isinstance(err, socket.gaierror):
            fix = ("the host name does not resolve on this machine, so there is no address to listen on. Check "
                   "the spelling of MASTER_ADDR (or TF_CONFIG's first chief/worker host), or add the name to this "
                   "host's DNS or /etc/hosts")
        elif err.errno == errno.EADDRNOTAVAIL:
            fix = ("the address is not one of this host's, and rank 0 listens on it. Run rank 0 on the host "
                   "MASTER_ADDR (or TF_CONFIG's first chief/worker) names, or name this host's own address")
        else:
            fix = "Pick a free port (MASTER_PORT, or the launcher's --master-port)"
        raise OSError(
            f"[rank 0] Cannot listen on {host}:{port} for the job's rendezvous: {err.strerror}; {fix}. "
            f"Received: master_addr={host!r}, master_port={port}"
        ) from err
    try:
        sock.listen(128)
    except OSError as err:  # two binds with SO_REUSEADDR can both succeed; only one listen does
        sock.close()
        raise OSError(f"[rank 0] Cannot listen on {host}:{port} for the job's rendezvous: {err.strerror}. "
                      f"Received: master_addr={host!r}, master_port={port}") from err
    return sock


def listen_if_free(host: str, port: int) -> socket.socket | None:
    """A socket listening on ``host:port`` only, or None when another process listens there or ``host`` is not this host's.

    How the first ``stratagem run`` of an elastic job becomes the one that serves its rendezvous store.
    """
    try:
        return _bind_listener(host, port)
    except OSError as err:
        if isinstance(err.__cause__, OSError) and err.__cause__.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
            return None
        raise


def wait_for_ranks(store: dist.Store, *, rank: int, world_size: int, timeout_s: float,
                   peers: Sequence[str] | None) -> None:
    """Returns once every rank has joined; else raises on every rank, naming the missing ones."""
    store.set(_JOIN_KEY.format(rank=rank), "1")
    keys = [_JOIN_KEY.format(rank=r) for r in range(world_size)]
    # The non-chief ranks wait a little longer, so they hear from the chief who is missing.
    deadline = time.monotonic() + timeout_s + (0 if rank == 0 else _NOTICE_S)
    while True:
        try:
            if store.check(keys):
                return
            if rank != 0 and store.check([_MISSING_KEY]):
                missing = [int(r) for r in store.get(_MISSING_KEY).decode().split(",")]
                store.add(_MISSING_SEEN_KEY, 1)
                raise _missing_error(missing, rank=rank, world_size=world_size, timeout_s=timeout_s, peers=peers)
            if time.monotonic() >= deadline:
                missing = [r for r, key in enumerate(keys) if not store.check([key])]
                if rank == 0:
                    _tell_others(store, missing, world_size)
                raise _missing_error(missing, rank=rank, world_size=world_size, timeout_s=timeout_s, peers=peers)
        except _StoreErrors:
            raise CollectiveTimeoutError(
                f"[rank {rank}/{world_size}] Lost the connection to the chief (rank 0) during rendezvous: "
                "it probably exited; its own log says why. Received: operation='rendezvous'",
                operation="rendezvous", rank=rank, timeout_s=timeout_s,
            ) from None
        time.sleep(0.05)


def _tell_others(store: dist.Store, missing: list[int], world_size: int) -> None:
    store.set(_MISSING_KEY, ",".join(map(str, missing)))
    present = world_size - len(missing) - 1
    deadline = time.monotonic() + _NOTICE_S
    while store.add(_MISSING_SEEN_KEY, 0) < present and time.monotonic() < deadline:
        time.sleep(0.05)


def _missing_error(missing: list[int], *, rank: int, world_size: int, timeout_s: float,
                   peers: Sequence[str] | None) -> CollectiveTimeoutError:
    named = ", ".join(describe(r, peers) for r in missing)
    return CollectiveTimeoutError(
        f"[rank {rank}/{world_size}] Rank(s) {missing} did not join the job within {timeout_s:g}s, so training cannot "
        f"start (every step needs all replicas): {named}. Start the missing worker(s) or check that their host can "
        "reach the chief, or raise the timeout with CommunicationOptions(timeout_seconds=...) or STRATAGEM_TIMEOUT_S. "
        f"Received: missing_ranks={missing}, world_size={world_size}",
        operation="rendezvous", rank=rank, timeout_s=timeout_s,
    )


def exchange_addresses(store: dist.Store, *, rank: int, world_size: int, address: str | None,
                       master_addr: str, peers: Sequence[str] | None) -> list[str]:
    """Publishes the address gloo listens on here and reads every rank's; refuses loopback on a multi-host job.

    A rank on loopback while the chief is elsewhere would make every peer's connection to it fail deep in gloo;
    named here, it is a one-line fix.
    """
    store.set(_ADDRESS_KEY.format(rank=rank), address or "")
    addresses = [store.get(_ADDRESS_KEY.format(rank=r)).decode() for r in range(world_size)]
    if not is_loopback(master_addr):
        stuck = [r for r, a in enumerate(addresses) if a and is_loopback(a)]
        if stuck:
            raise ConfigurationError(
                f"[rank {rank}/{world_size}] {', '.join(describe(r, peers) for r in stuck)} would accept the "
                f"other hosts' connections on a loopback address only, so the job cannot connect. Unset "
                f"{GLOO_IFNAME_ENV} on that host (stratagem then picks the interface that reaches the chief) or "
                f"set it to that interface. Received: addresses={addresses}, master_addr={master_addr!r}")
    return addresses


def run_bounded_setup(setup: Callable[[], None], store: dist.Store, *, rank: int, world_size: int,
                      timeout_s: float, addresses: Sequence[str], peers: Sequence[str] | None) -> None:
    """Runs the backend's setup (gloo's full mesh) in a thread, at most ``timeout_s``.

    gloo's connect can wait several times the timeout, and a rank whose own setup failed leaves its peers waiting on
    it; so a failure is posted to the store, and every rank gives up when it sees one or when time is up.
    """
    failure: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            setup()
        except BaseException as err:  # noqa: BLE001 -- handed to the waiting thread, which raises it
            failure.append(err)
        finally:
            done.set()

    # NOTE: a daemon thread, so a setup stuck in C++ past our deadline cannot keep the process alive.
    threading.Thread(target=target, name="stratagem-backend-setup", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while not done.wait(0.1):
        posted = _posted_failure(store)
        if posted is not None:
            raise RuntimeError(f"[rank {rank}/{world_size}] The process group could not be set up because "
                               f"{posted}. That rank's own log has the details.")
        if time.monotonic() >= deadline:
            raise CollectiveTimeoutError(
                f"[rank {rank}/{world_size}] Setting up the process group's connections did not finish within "
                f"{timeout_s:g}s: a peer could not connect to this host or this host to it. Check that every host "
                f"reaches every other host on any port. Received: addresses={list(addresses)}, timeout_s={timeout_s:g}",
                operation="backend_setup", rank=rank, timeout_s=timeout_s,
            )
    if failure:
        text = str(failure[0])
        if _FORGED in text:  # SignedStore refused a forged value gloo read; the backend made it a RuntimeError
            start = max(0, text.rfind("[", 0, text.index(_FORGED)))  # from "[rank r/n, store at ...]" on
            raise ConfigurationError(text[start:].splitlines()[0]) from None
        message = _gloo_failure(text, rank=rank, addresses=addresses, peers=peers)
        try:
            store.set(_SETUP_FAILED_KEY, f"{describe(rank, peers)} failed: {message}")
            if rank == 0:
                time.sleep(0.5)  # the store lives in this process: let the others read why first
        except _StoreErrors:
            pass
        raise RuntimeError(f"[rank {rank}/{world_size}] {message}") from None


def _posted_failure(store: dist.Store) -> str | None:
    try:
        return store.get(_SETUP_FAILED_KEY).decode() if store.check([_SETUP_FAILED_KEY]) else None
    except _StoreErrors:
        return "the chief (rank 0) exited"


def _gloo_failure(text: str, *, rank: int, addresses: Sequence[str],
                  peers: Sequence[str] | None) -> str:
    """gloo's connect error as one line naming the peer it could not reach and what to check."""
    first = text.splitlines()[0] if text else text
    remote = re.search(r"remote=\[?([0-9A-Fa-f:.]+?)\]?:(\d+)", first)
    if remote is None:
        return f"Could not set up the process group: {first}"
    host, port = remote.group(1), remote.group(2)
    owners = [r for r, a in enumerate(addresses) if a == host and r != rank]
    who = f"{', '.join(describe(r, peers) for r in owners)} at {host}:{port}" if owners else f"a peer at {host}:{port}"
    mine = addresses[rank] if rank < len(addresses) else ""
    if is_loopback(host) and not (mine and is_loopback(mine)):  # a loopback job's peers are on loopback
        check = (f"that peer advertised a loopback address, which from here is this host itself (its host name "
                 f"resolves to loopback). Unset {GLOO_IFNAME_ENV} on that host so stratagem picks the interface "
                 "that reaches the chief, or set it to that interface")
    else:
        check = (f"check firewalls, and that {host} is that host's address as the others reach it (else set "
                 f"{GLOO_IFNAME_ENV} there to the interface facing the other hosts)")
    return (
        f"Could not connect to {who} to set up the process group. gloo connects every pair of ranks directly "
        f"on a free port, so each host must reach every other host's address on any port: {check}. Received: "
        f"addresses={list(addresses)}, error={first[:300]!r}")
