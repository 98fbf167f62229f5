"""The chief's coordination service: the step queue, workers' liveness, answers to replay (gRPC).

Workers run the chief's script and replay its calls: the ``n``-th ``schedule`` on a worker holds the chief's
``n``-th function and arguments, so only ordinals travel ("run closure n"), and the worker reports the return value
(tensors as raw bytes, the rest as JSON). What the chief observes that could steer its program (a fetched value,
``done()``) is handed to the workers too, so their replay takes the same path. A worker heartbeats every second; one
silent for ``worker_timeout_s``, or registering again after a restart, has its closures requeued at the front. The
first report of a closure wins, and the servers refuse a second push of a step, so a re-run step is applied once.
Every call proves the job's secret (``auth``); only a registered worker, in the same incarnation, may poll or
report, and only for a closure handed to it: anything else is refused ``FAILED_PRECONDITION``.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any


import grpc

from stratagem.distribute.ps import rpc, wire
from stratagem.distribute.ps.auth import Credentials
from stratagem.errors import CoordinatorError

SERVICE = "stratagem.Coordinator"
METHODS = ("Hello", "Poll", "Report", "Heartbeat", "Bye")
POLL_WAIT_S = 0.5
HEARTBEAT_S = 1.0


@dataclass
class _Worker:
    incarnation: str
    last_seen: float
    alive: bool = True
    left: bool = False
    closures_run: int = 0


@dataclass
class _State:
    functions: list[str] = field(default_factory=list)  # qualname of closure n, to catch diverged replays
    queue: collections.deque = field(default_factory=collections.deque)
    in_flight: dict[int, tuple[int, str]] = field(default_factory=dict)
    handed: dict[int, set[tuple[int, str]]] = field(default_factory=dict)  # every (worker, incarnation) given n
    results: dict[int, bytes] = field(default_factory=dict)
    ran_by: dict[int, tuple[int, str]] = field(default_factory=dict)
    joins: int = 0
    done_answers: list[bool] = field(default_factory=list)
    shared: list[bytes] = field(default_factory=list)  # values the chief hands its workers (epoch logs)
    failure: str | None = None
    finished: bool = False
    workers: dict[int, _Worker] = field(default_factory=dict)


class CoordinatorService:
    """Runs on the chief: the closure queue, the workers' liveness, and the answers they replay."""

    def __init__(self, address: str, *, num_workers: int, step_base: int, worker_timeout_s: float,
                 credentials: Credentials | None = None) -> None:
        self.num_workers, self.step_base, self.worker_timeout_s = num_workers, step_base, worker_timeout_s
        self._state = _State()
        self._cond = threading.Condition()
        handlers = {name: getattr(self, f"_{name.lower()}") for name in METHODS}
        self._server, _, self._guard = rpc.start_server(
            address, SERVICE, handlers, max_workers=max(8, 2 * num_workers + 4),
            what="The chief's coordination service", credentials=credentials)
        self.address = address
        self._server.start()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._reaper = threading.Thread(target=self._reap, name="stratagem-worker-reaper", daemon=True)
        self._reaper.start()

    # -- the chief's own calls (in-process) --
    def schedule(self, function: str) -> int:
        with self._cond:
            self._raise_failure()
            n = len(self._state.functions)
            self._state.functions.append(function)
            self._state.queue.append(n)
            self._cond.notify_all()
            return n

    def wait_result(self, n: int, timeout_s: float) -> bytes:
        return self._wait(lambda: self._state.results.get(n), f"the result of closure {n}", timeout_s)

    def join(self, timeout_s: float) -> None:
        state = self._state
        self._wait(lambda: len(state.results) == len(state.functions) or None, "join", timeout_s)
        with self._cond:
            state.joins += 1
            self._cond.notify_all()

    def done(self) -> bool:
        with self._cond:
            self._raise_failure()
            answer = len(self._state.results) == len(self._state.functions)
            self._state.done_answers.append(answer)
            self._cond.notify_all()
            return answer

    def share(self, message: bytes) -> None:
        """Publishes the next value the workers' replay receives in place of computing it."""
        with self._cond:
            self._state.shared.append(message)
            self._cond.notify_all()

    def stats(self) -> dict[str, Any]:
        """Who ran what: per worker, closures reported and whether it is alive."""
        with self._cond:
            return {"workers": {i: {"alive": w.alive, "incarnation": w.incarnation, "closures_run": w.closures_run}
                                for i, w in self._state.workers.items()},
                    "ran_by": dict(self._state.ran_by), "scheduled": len(self._state.functions),
                    "unauthenticated_refused": self._guard.refused}

    def shutdown(self, grace_s: float) -> None:
        """Lets the workers finish replaying (answers stay available), then stops serving."""
        deadline = time.monotonic() + grace_s
        with self._cond:
            self._state.finished = True
            self._cond.notify_all()
            while any(w.alive and not w.left for w in self._state.workers.values()) and time.monotonic() < deadline:
                self._cond.wait(0.2)
        self._stop.set()
        self._server.stop(1.0).wait(2.0)

    def _wait(self, ready: Any, what: str, timeout_s: float) -> Any:
        with self._cond:
            while True:
                self._raise_failure()
                value = ready()
                if value is not None:
                    return value
                if not any(w.alive for w in self._state.workers.values()) and self._no_worker_since() > timeout_s:
                    raise CoordinatorError(f"No worker has been alive for {timeout_s:g}s while the chief waits for "
                                            f"{what}. Start the workers (same script, TF_CONFIG task type 'worker').")
                self._cond.wait(0.5)

    def _no_worker_since(self) -> float:
        seen = [w.last_seen for w in self._state.workers.values()]
        return time.monotonic() - (max(seen) if seen else self._started)

    def _raise_failure(self) -> None:
        if self._state.failure is not None:
            raise CoordinatorError(self._state.failure)

    # -- RPCs from workers --
    def _hello(self, request: bytes, context: Any) -> bytes:
        _, _, worker, incarnation = self._identity(request, context)
        with self._cond:
            old = self._state.workers.get(worker)
            if old is not None and old.incarnation != incarnation:
                self._requeue(worker, old.incarnation)  # restarted: what the old process held is lost
            self._state.workers[worker] = _Worker(incarnation, time.monotonic())
            self._cond.notify_all()
        return wire.encode({}, {"step_base": self.step_base, "num_workers": self.num_workers})

    def _heartbeat(self, request: bytes, context: Any) -> bytes:
        _, _, worker, incarnation = self._identity(request, context)
        with self._cond:
            self._touch(worker, incarnation)
        return wire.encode({}, {})

    def _bye(self, request: bytes, context: Any) -> bytes:
        _, _, worker, incarnation = self._identity(request, context)
        with self._cond:
            record = self._state.workers.get(worker)
            if record is not None and record.incarnation == incarnation:
                record.left = True
                self._requeue(worker, incarnation)
            self._cond.notify_all()
        return wire.encode({}, {})

    def _report(self, request: bytes, context: Any) -> bytes:
        tensors, meta, worker, incarnation = self._identity(request, context)
        n, error = meta.get("closure"), meta.get("error")
        if not isinstance(n, int) or isinstance(n, bool):
            rpc.refuse(context, f"Report needs meta.closure (int). Received: {n!r}")
        with self._cond:
            self._check_registered(worker, incarnation, context)
            if (worker, incarnation) not in self._state.handed.get(n, ()):
                # A report for a step never scheduled, or handed to someone else, must not complete it.
                _deny(context, f"Closure {n} was not handed to worker {worker} (incarnation {incarnation[:8]}), so "
                               f"its report is refused. Received: closure={n}, scheduled={len(self._state.functions)}")
            self._touch(worker, incarnation)
            if self._state.in_flight.get(n) == (worker, incarnation):
                del self._state.in_flight[n]
            if n in self._state.results:
                return wire.encode({}, {"accepted": False})  # a re-run closure: the first report won
            if n in self._state.queue:
                self._state.queue.remove(n)
            if error is not None:
                self._state.failure = (f"Closure {n} ({self._state.functions[n]}) failed on worker {worker}: {error}")
            else:
                self._state.results[n] = wire.encode(tensors, {"value": meta.get("value")})
                self._state.ran_by[n] = (worker, incarnation)
                self._state.workers[worker].closures_run += 1
            self._cond.notify_all()
        return wire.encode({}, {"accepted": True})

    def _poll(self, request: bytes, context: Any) -> bytes:
        _, meta, worker, incarnation = self._identity(request, context)
        scheduled, wait = meta.get("scheduled"), meta.get("wait")
        if not isinstance(scheduled, int) or not isinstance(wait, dict):
            rpc.refuse(context, "Poll needs meta.scheduled (int) and meta.wait (object)")
        deadline = time.monotonic() + POLL_WAIT_S
        with self._cond:
            self._check_registered(worker, incarnation, context)
            while True:
                self._touch(worker, incarnation)
                state = self._state
                if state.failure is not None:
                    return wire.encode({}, {"error": state.failure})
                answer = self._answer(wait)
                if answer is not None:
                    return answer
                n = next((k for k in state.queue if k < scheduled), None)
                if n is not None:
                    state.queue.remove(n)
                    state.in_flight[n] = (worker, incarnation)
                    state.handed.setdefault(n, set()).add((worker, incarnation))
                    return wire.encode({}, {"run": n, "function": state.functions[n]})
                if state.finished and len(state.results) == len(state.functions):
                    return wire.encode({}, {"error": f"The chief finished its program while this worker waits for "
                                                     f"{wait}: the worker's script took another path than the chief's."})
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return wire.encode({}, {"idle": True})
                self._cond.wait(remaining)

    def _answer(self, wait: dict[str, Any]) -> bytes | None:
        kind, index = wait.get("kind"), wait.get("index")
        state = self._state
        if kind == "value" and isinstance(index, int) and index in state.results:
            return state.results[index]
        if kind == "join" and isinstance(index, int) and state.joins > index:
            return wire.encode({}, {"joined": True})
        if kind == "done" and isinstance(index, int) and len(state.done_answers) > index:
            return wire.encode({}, {"done": state.done_answers[index]})
        if kind == "shared" and isinstance(index, int) and len(state.shared) > index:
            return state.shared[index]
        return None

    # -- bookkeeping --
    def _check_registered(self, worker: int, incarnation: str, context: Any) -> None:
        record = self._state.workers.get(worker)
        if record is None or record.incarnation != incarnation:
            _deny(context, f"Worker {worker} (incarnation {incarnation[:8]}) has not registered with Hello, or a newer "
                           "start of it has: its call is refused.")

    def _touch(self, worker: int, incarnation: str) -> None:
        record = self._state.workers.get(worker)
        if record is not None and record.incarnation == incarnation:
            record.last_seen = time.monotonic()
            if not record.alive:
                record.alive = True
                self._cond.notify_all()

    def _requeue(self, worker: int, incarnation: str) -> None:
        lost = sorted(n for n, holder in self._state.in_flight.items() if holder == (worker, incarnation))
        for n in reversed(lost):
            del self._state.in_flight[n]
            self._state.queue.appendleft(n)
        if lost:
            self._cond.notify_all()

    def _reap(self) -> None:
        while not self._stop.wait(0.25):
            with self._cond:
                now = time.monotonic()
                for index, record in self._state.workers.items():
                    if record.alive and not record.left and now - record.last_seen > self.worker_timeout_s:
                        record.alive = False
                        self._requeue(index, record.incarnation)
                self._cond.notify_all()

    def _identity(self, request: bytes, context: Any) -> tuple[dict[str, Any], dict[str, Any], int, str]:
        """The request's tensors and meta, and which worker (and which start of it) sent it."""
        tensors, meta = rpc.decode(request, context)
        worker, incarnation = meta.get("worker"), meta.get("incarnation")
        if not isinstance(worker, int) or not 0 <= worker < self.num_workers or not isinstance(incarnation, str):
            rpc.refuse(context, f"Requests need meta.worker (0..{self.num_workers - 1}) and meta.incarnation. "
                             f"Received: worker={worker!r}")
        return tensors, meta, worker, incarnation


def _deny(context: Any, message: str) -> None:
    """Answers FAILED_PRECONDITION: a well-formed call the job's state does not allow."""
    context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)
    raise AssertionError("unreachable: grpc's abort raises")
