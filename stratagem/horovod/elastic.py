"""``hvd.elastic``: Horovod's elastic-training API over ``stratagem run --nnodes MIN:MAX``.

Horovod retries a failed step inside the same processes; torch's elastic agents restart the processes instead, so a
commit must outlive them: ``TorchState.commit()`` also writes a ``stratagem.checkpoint.state`` training state to the
file ``STRATAGEM_ELASTIC_STATE`` names, which ``run`` restores on the next start and syncs from rank 0 (without it,
commits stay in memory as Horovod's). ``ElasticSampler`` shards the epoch's unprocessed examples over the workers.
"""

from __future__ import annotations

import copy
import functools
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from stratagem.checkpoint import state as training_state
from stratagem.checkpoint.state import StateKind
from stratagem.horovod.basics import rank, size
from stratagem.horovod.broadcast import broadcast_optimizer_state, broadcast_parameters
from stratagem.horovod.objects import broadcast_object

STATE_FILE_ENV = "STRATAGEM_ELASTIC_STATE"


class ElasticSampler(torch.utils.data.Sampler[int]):
    """Horovod's ``ElasticSampler``: this rank's share of the epoch's examples not processed yet.

    Args:
        dataset: Anything with ``len``.
        shuffle: Permute the indices each epoch (the same permutation on every rank).
        seed: Seed of that permutation, combined with the epoch.
        num_replicas: Workers to shard over; default ``hvd.size()`` at each ``reset``.
        rank: This worker's index; default ``hvd.rank()``.
    """

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0, *,
                 num_replicas: int | None = None, rank: int | None = None) -> None:
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self._num_replicas, self._rank = num_replicas, rank
        self.epoch = 0
        self.processed_indices: set[int] = set()
        self.reset()
        self._iterated = self._shards()  # every rank's shard of the last iteration: what record_batch counts in

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch``: nothing processed yet."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()
        self._iterated = self._shards()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Marks the ``batch_idx``-th batch of every rank's last iteration as processed.

        Every rank records the whole global batch (Horovod counts ``batch_size * num_replicas``), so rank 0's commit
        alone holds what the job processed and a restart with new processes repeats nothing.
        """
        for shard in self._iterated:
            self.record_indices(shard[batch_idx * batch_size:(batch_idx + 1) * batch_size])

    def record_indices(self, indices: list[int]) -> None:
        self.processed_indices.update(int(i) for i in indices)

    @property
    def processed_num(self) -> int:
        """How many examples of the epoch are recorded as processed, by every rank."""
        return len(self.processed_indices)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed_indices)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.processed_indices = {int(i) for i in state["processed_indices"]}
        self.reset()

    def reset(self) -> None:
        """Reshards the epoch's unprocessed indices over the current workers (after a membership change)."""
        num_replicas = self._num_replicas or size()
        replica = rank() if self._rank is None else self._rank
        order = list(range(len(self.dataset)))
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(order), generator=generator).tolist()
        remaining = [i for i in order if i not in self.processed_indices]
        # Every rank takes the same number (the last few repeat the first), so ranks run equal steps.
        per_rank = -(-len(remaining) // num_replicas)
        self._padded = list(itertools.islice(itertools.cycle(remaining), per_rank * num_replicas))
        self._num_replicas_now = num_replicas
        self.indices = self._padded[replica::num_replicas]

    def _shards(self) -> list[list[int]]:
        return [self._padded[r::self._num_replicas_now] for r in range(self._num_replicas_now)]

    def __iter__(self) -> Iterator[int]:
        # NOTE: a restore or sync reshards self.indices; batches of an iteration already under way
        # keep the indices they were drawn from, so record_batch counts the examples really seen.
        self._iterated = self._shards()
        return iter(list(self.indices))

    def __len__(self) -> int:
        return len(self.indices)


class TorchState:
    """Horovod's ``TorchState``: the model, optimizer, samplers and plain values that a restart resumes from.

    Extra keyword arguments become attributes (``state.epoch``); an ``ElasticSampler`` keeps its processed indices.
    """

    def __init__(self, model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
                 **kwargs: Any) -> None:
        self.model, self.optimizer = model, optimizer
        self._names = list(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._reset_callbacks: list[Callable[[], None]] = []
        self._saved: dict[str, Any] | None = None
        self.save()

    def register_reset_callbacks(self, callbacks: list[Callable[[], None]]) -> None:
        """Functions called after a restore with a new set of workers (e.g. to rescale the learning rate)."""
        self._reset_callbacks.extend(callbacks)

    def commit(self) -> None:
        """Saves the state; with ``STRATAGEM_ELASTIC_STATE`` set, rank 0 also writes it to that file."""
        self.save()
        path = os.environ.get(STATE_FILE_ENV)
        if path and rank() == 0 and self._saved is not None:
            # The one training-state format: weights and optimizer, with the values and samplers as counters.
            training_state.write(path, self._saved, kind=StateKind.ELASTIC, counters=self._saved["counters"])

    def check_host_updates(self) -> None:
        """Horovod checks for added hosts here; the elastic agents restart the workers to take them in."""

    def save(self) -> None:
        module_state = training_state.module_state(self.model, self.optimizer)
        # NOTE: an optimizer's state_dict() holds its live state tensors (momentum, Adam's moments and step),
        # which the next step() updates in place: without a copy, restore() would bring back the current
        # state, not the committed one (Horovod's TorchState deep-copies it too).
        module_state["optimizer"] = copy.deepcopy(module_state["optimizer"])
        self._saved = {
            **module_state,
            "counters": {
                "values": {n: getattr(self, n) for n in self._names
                           if not isinstance(getattr(self, n), ElasticSampler)},
                "samplers": {n: getattr(self, n).state_dict() for n in self._names
                             if isinstance(getattr(self, n), ElasticSampler)},
            },
        }

    def on_reset(self) -> None:
        """Calls the reset callbacks: the workers changed."""
        for callback in self._reset_callbacks:
            callback()

    def restore(self, saved: dict[str, Any] | None = None) -> None:
        """Puts back the last ``save`` (or the given saved state)."""
        saved = saved if saved is not None else self._saved
        if saved is None:
            return
        # A copy again: load_state_dict keeps the tensors it is given, and later steps would change the saved state.
        training_state.load_module_state(self.model, self.optimizer,
                                         {**saved, "optimizer": copy.deepcopy(saved["optimizer"])})
        for name, value in saved["counters"]["values"].items():
            setattr(self, name, value)
        for name, sampler_state in saved["counters"]["samplers"].items():
            getattr(self, name).load_state_dict(sampler_state)

    def sync(self) -> None:
        """Makes every rank's state rank 0's, and saves it, so a later ``restore()`` is the same on every rank."""
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        # Samplers too are rank 0's (as Horovod 0.28): each rank records every rank's batches, so rank 0's
        # record is the job's, also when the other ranks are new processes after a restart.
        synced = broadcast_object({n: getattr(self, n).state_dict() if isinstance(getattr(self, n), ElasticSampler)
                                   else getattr(self, n) for n in self._names}, root_rank=0)
        for name, value in synced.items():
            if isinstance(getattr(self, name), ElasticSampler):
                getattr(self, name).load_state_dict(value)
            else:
                setattr(self, name, value)
        self.save()


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Horovod's ``@hvd.elastic.run``: ``func(state, ...)`` starts from the last committed state, synced.

    On a restart the state committed to ``STRATAGEM_ELASTIC_STATE`` is loaded first. A failure inside ``func`` ends this
    process; the agents restart it.
    """

    @functools.wraps(func)
    def wrapper(state: TorchState, *args: Any, **kwargs: Any) -> Any:
        path = os.environ.get(STATE_FILE_ENV)
        resumed = bool(path) and os.path.exists(str(path))
        if size() > 1:
            # Rank 0's answer for every rank: on hosts that do not share its disk the file may be missing,
            # and those ranks would skip the reset callbacks (a learning rate rescaled on some ranks only).
            resumed = bool(broadcast_object(resumed, root_rank=0))
        if resumed and rank() == 0:
            state.restore(training_state.read(str(path), kind=StateKind.ELASTIC))
        state.sync()
        if resumed:
            state.on_reset()
        return func(state, *args, **kwargs)

    return wrapper
