"""``ClusterCoordinator``: schedule steps on whichever worker is free (tf.distribute's shape).

On the chief, ``schedule`` queues a step and returns a ``RemoteValue`` at once, ``join`` waits for every queued step
and ``done`` says whether all have finished. A worker runs the chief's script: the same calls record the steps, and
each call that waits (``join``, ``done``, ``fetch``) runs the steps the chief hands it until the answer arrives.
Only step numbers and return values cross the network (``ps.coordination``, ``coordination_client``, ``results``).

Example:
    >>> coordinator = ClusterCoordinator(strategy)  # doctest: +SKIP
    >>> iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))  # doctest: +SKIP
    >>> losses = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(100)]  # doctest: +SKIP
    >>> coordinator.join(); print(losses[-1].fetch())  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from stratagem import _nest
from stratagem._python_internals import run_before_thread_shutdown
from stratagem.distribute.cluster import CHIEF
from stratagem.distribute.ps import coordination, coordination_client, results
from stratagem.errors import CoordinatorError

if TYPE_CHECKING:  # parameter_server.py imports this module's users
    from stratagem.distribute.parameter_server import ParameterServerStrategy
    from stratagem.distribute.strategy import Strategy


class RemoteValue:
    """The future result of a scheduled step; ``fetch()`` waits for it and returns numpy values."""

    def __init__(self, coordinator: ClusterCoordinator, index: int) -> None:
        self._coordinator, self._index = coordinator, index

    def fetch(self) -> Any:
        """Waits for the step and returns its value (tensors as numpy arrays)."""
        return self._coordinator._fetch(self._index)

    def __repr__(self) -> str:
        return f"RemoteValue(step {self._index})"


class PerWorkerValues:
    """One value per worker: on a worker, this worker's own; on the chief, a placeholder."""

    def __init__(self, local: Any) -> None:
        self._local = local

    def __iter__(self) -> PerWorkerValues:
        # iter(per_worker_dataset) gives per-worker iterators, as in TF.
        return PerWorkerValues(iter(self._local) if self._local is not None else None)

    def __next__(self) -> Any:
        if self._local is None:
            raise RuntimeError("Per-worker values live on the workers: use them inside a scheduled function.")
        return next(self._local)

    def __repr__(self) -> str:
        return f"PerWorkerValues({'local' if self._local is not None else 'on the workers'})"


class ClusterCoordinator:
    """Schedules functions on the workers of a ``ParameterServerStrategy`` (one per strategy).

    Args:
        strategy: The ``ParameterServerStrategy`` whose workers run the steps.
    """

    def __new__(cls, strategy: Strategy) -> ClusterCoordinator:
        existing = getattr(strategy, "cluster_coordinator", None)  # one coordinator per strategy, as in TF
        if existing is not None:
            return existing  # type: ignore[no-any-return]
        return super().__new__(cls)

    def __init__(self, strategy: Strategy) -> None:
        if getattr(self, "_strategy", None) is not None:
            return
        from stratagem.distribute.parameter_server import ParameterServerStrategy

        if not isinstance(strategy, ParameterServerStrategy):
            raise ValueError(f"ClusterCoordinator needs a ParameterServerStrategy. Received: {type(strategy).__name__}")
        self._strategy = strategy
        self._closures: list[tuple[Callable[..., Any], tuple, dict]] = []  # a worker's copies of the steps
        self._joins = 0
        self._dones = 0
        self._shares = 0
        self._timeout_s = strategy.timeout_s
        self._service: coordination.CoordinatorService | None = None
        self._client: coordination_client.CoordinatorClient | None = None
        if strategy.task_type == CHIEF:
            self._service = coordination.CoordinatorService(
                strategy.chief_address, num_workers=strategy.num_workers, step_base=_next_step_id(strategy),
                worker_timeout_s=strategy.worker_timeout_s, credentials=strategy.credentials)
        else:
            self._client = coordination_client.CoordinatorClient(strategy.chief_address, strategy.task_id,
                                                                 timeout_s=self._timeout_s,
                                                                 credentials=strategy.credentials)
        strategy.cluster_coordinator = self
        # The chief must keep answering its workers while they finish replaying, and gRPC serves on a thread pool:
        # close after the main thread ends but before the pools stop.
        run_before_thread_shutdown(self._close)

    @property
    def strategy(self) -> Any:
        return self._strategy

    # ---- TF's API ------------------------------------------------------------------------
    def schedule(self, fn: Callable[..., Any], args: tuple | None = None, kwargs: dict | None = None) -> RemoteValue:
        """Queues ``fn(*args, **kwargs)`` for the next free worker; returns its ``RemoteValue``."""
        if self._service is not None:  # the chief only queues the step's number; workers run their copies
            return RemoteValue(self, self._service.schedule(_function_name(fn)))
        self._closures.append((fn, tuple(args or ()), dict(kwargs or {})))
        return RemoteValue(self, len(self._closures) - 1)

    def join(self) -> None:
        """Waits until every scheduled step has finished; raises the first step's error, if any."""
        if self._service is not None:
            self._service.join(self._timeout_s)
        else:
            self._serve({"kind": "join", "index": self._joins})
        self._joins += 1

    def done(self) -> bool:
        """Whether every scheduled step has finished (never waits on the chief)."""
        if self._service is not None:
            answer = self._service.done()
        else:
            answer = bool(self._serve({"kind": "done", "index": self._dones})[1]["done"])
        self._dones += 1
        return answer

    def fetch(self, values: Any) -> Any:
        """``RemoteValue``s in a nested structure, replaced by their fetched results."""
        return _nest.map_structure(lambda v: v.fetch() if isinstance(v, RemoteValue) else v, values)

    def create_per_worker_dataset(self, dataset_fn: Callable[..., Iterable[Any]] | Iterable[Any]) -> PerWorkerValues:
        """Builds each worker's own dataset by calling ``dataset_fn`` there (never on the chief).

        ``dataset_fn`` may take an ``InputContext`` (this worker's index among ``num_workers`` pipelines) to shard
        or seed its data; a dataset passed instead of a function is iterated whole by every worker.
        """
        if self._service is not None:
            return PerWorkerValues(None)
        if not callable(dataset_fn):
            return PerWorkerValues(dataset_fn)
        takes_context = bool(inspect.signature(dataset_fn).parameters)
        return PerWorkerValues(dataset_fn(self._strategy.worker_input_context()) if takes_context else dataset_fn())

    def share_from_chief(self, value: Any) -> Any:
        """On the chief: publishes ``value`` and returns it; on a worker: returns the chief's value.

        For what the chief alone computes but every task's replay must see the same way (fit's epoch logs, which
        callbacks decide on).
        """
        index = self._shares
        self._shares += 1
        if self._service is not None:
            self._service.share(results.encode_value(value))
            return value
        return results.decode_value(self._serve({"kind": "shared", "index": index})[2])

    # ---- chief-side introspection (tests, tools) ---------------------------------------------
    def stats(self) -> dict[str, Any]:
        """On the chief: per worker, steps run and liveness; which worker ran each step."""
        return self._service.stats() if self._service is not None else {}

    # ---- internals ------------------------------------------------------------------------
    def _fetch(self, index: int) -> Any:
        if self._service is not None:
            return results.decode_value(self._service.wait_result(index, self._timeout_s))
        return results.decode_value(self._serve({"kind": "value", "index": index})[2])

    def _serve(self, wait: dict[str, Any]) -> tuple[Any, dict[str, Any], bytes]:
        """Runs the steps handed to this worker until the chief answers ``wait``."""
        assert self._client is not None
        while True:
            tensors, meta, raw = self._client.poll(len(self._closures), wait)
            if "error" in meta:
                raise CoordinatorError(meta["error"])
            if "run" in meta:
                self._run(int(meta["run"]), str(meta.get("function")))
            elif not meta.get("idle"):
                return tensors, meta, raw

    def _run(self, index: int, function: str) -> None:
        assert self._client is not None
        fn, args, kwargs = self._closures[index]
        if _function_name(fn) != function:
            message = (f"Step {index} is {function} on the chief but {_function_name(fn)} on worker "
                       f"{self._strategy.task_id}: the worker's script took another path. Keep the code that "
                       "schedules steps the same on every task (no branching on the task type before it).")
            self._client.report(index, error=message)
            raise CoordinatorError(message)
        args = tuple(a._local if isinstance(a, PerWorkerValues) else a for a in args)
        kwargs = {k: (v._local if isinstance(v, PerWorkerValues) else v) for k, v in kwargs.items()}
        try:
            with self._strategy.scheduled_step(self._client.step_base + index):
                value = results.encode_value(fn(*args, **kwargs), what="A scheduled function's return value")
        except Exception as err:
            self._client.report(index, error=results.error_text(err))
            raise
        self._client.report(index, value=value)

    def _close(self) -> None:
        service, client = self._service, self._client
        self._service = self._client = None
        if service is not None:
            service.shutdown(grace_s=self._timeout_s)
        if client is not None:
            client.close()


def _function_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", type(fn).__name__)


def _next_step_id(strategy: ParameterServerStrategy) -> int:
    """Step ids continue after every step the servers have applied (a restarted chief reuses none)."""
    return 1 + max(int(client.call("Stats", {}, {})[1]["highest_step"]) for client in strategy.variables.clients)


__all__ = ["ClusterCoordinator", "PerWorkerValues", "RemoteValue"]
