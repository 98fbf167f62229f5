"""Horovod's ``DistributedOptimizer``: all-reduce each gradient as soon as backward has produced it.

A hook per parameter adds its gradient, after ``backward_passes_per_step`` passes, to a bucket (Horovod's tensor
fusion, at most ``HOROVOD_FUSION_THRESHOLD`` bytes, 32 MiB by default) whose all-reduce starts when it is full,
overlapping the rest of backward; ``step()`` waits for them, then steps the wrapped optimizer. Gradients are views of
their bucket's buffer, kept across steps (DDP's ``gradient_as_bucket_view``): no copy back. The ranks check a step's
gradients once (count, checksum of shapes and dtypes), not once per gradient. Unlike Horovod, which subclasses the
user's optimizer class, this wraps it: ``param_groups``, ``state`` and ``defaults`` are the wrapped optimizer's, so
schedulers and checkpoints work on either, but ``isinstance(opt, torch.optim.SGD)`` is false.
"""

from __future__ import annotations

import contextlib
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from stratagem._environ import number_from_env
from stratagem.horovod import _handles, _negotiation, basics, grouped, ops
from stratagem.horovod._negotiation import Call, Kind
from stratagem.horovod.basics import ProcessSet, global_process_set
from stratagem.horovod.compression import Compression, Compressor

__all__ = ["DistributedOptimizer"]


def _wrapped_attribute(name: str) -> Any:
    """A property reading and setting the wrapped optimizer's attribute ``name``."""
    return property(lambda self: getattr(self._optimizer, name),
                    lambda self, value: setattr(self._optimizer, name, value))


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer`` so that ``step()`` applies gradients averaged over every process.

    ``step()``'s result is the same on every process, and equals one process stepping on the union of the batches when
    each loss is a mean over its batch. With ``backward_passes_per_step=k``, k passes' gradients are summed locally
    (scale each loss by 1/k), then all-reduced.

    Args:
        optimizer: The torch optimizer to wrap.
        named_parameters: ``model.named_parameters()``, for error messages. Default: unnamed.
        compression: ``Compression.none``, ``Compression.fp16`` (sent as float16) or your own ``Compressor``.
        backward_passes_per_step: Backward passes accumulated locally before the all-reduce.
        op: ``hvd.Average`` (default) or ``hvd.Sum``; ``hvd.Adasum`` raises ``NotImplementedError``.
        gradient_predivide_factor: With ``op=Average``, gradients are divided by this before the sum and by ``size /
            factor`` after (Horovod's split).
        process_set: Average over a registered ``ProcessSet`` only; on a rank outside it, ``step()`` is the wrapped
            optimizer's local step (as Horovod).
        sparse_as_dense: Send sparse gradients (``nn.Embedding(sparse=True)``) as dense ones; by default they go through
            ``sparse_allreduce_async``.

    Raises:
        TypeError: If ``optimizer`` is not a ``torch.optim.Optimizer``.
        ValueError: For malformed ``named_parameters``, ``backward_passes_per_step < 1``, or a predivide factor without
            ``op=Average``.

    Example:
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())  # doctest: +SKIP
        >>> optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())  # doctest: +SKIP
        >>> loss.backward(); optimizer.step()  # doctest: +SKIP
    """

    def __init__(self, optimizer: torch.optim.Optimizer,
                 named_parameters: Iterable[tuple[str, torch.nn.Parameter]] | None = None,
                 compression: type[Compressor] = Compression.none, backward_passes_per_step: int = 1,
                 op: ops.ReduceOp | str = ops.Average, gradient_predivide_factor: float = 1.0,
                 process_set: ProcessSet = global_process_set, sparse_as_dense: bool = False) -> None:
        # NOTE: no super().__init__: the wrapped optimizer owns param_groups, state and hooks.
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("DistributedOptimizer wraps a torch.optim.Optimizer, e.g. "
                            "hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01)). "
                            f"Received: optimizer of type {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._op = ops.resolve_op(None, op)
        if backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be at least 1. "
                             f"Received: backward_passes_per_step={backward_passes_per_step}")
        if gradient_predivide_factor != 1.0 and self._op is not ops.Average:
            raise ValueError(f"gradient_predivide_factor splits an average, so it needs op=hvd.Average. "
                             f"Received: op={self._op.value}, gradient_predivide_factor={gradient_predivide_factor}")
        self._compression = compression
        self._backward_passes_per_step = backward_passes_per_step
        self._predivide = gradient_predivide_factor
        self._process_set = process_set
        self._sparse_as_dense = sparse_as_dense
        self._sparse: set[torch.Tensor] = set()  # parameters whose gradients came sparse
        self._densified: set[torch.Tensor] = set()  # sparse gradients sent dense this step (sparse_as_dense)
        # A rank outside the process set steps on its own gradients (Horovod): no hooks, no all-reduce.
        self._local = not process_set.included()
        self._names = _parameter_names(optimizer, named_parameters)
        self._order: list[torch.Tensor] = []  # the order every rank launches all-reduces in
        self._delay: dict[torch.Tensor, int] = {}
        self._handles: dict[torch.Tensor, tuple[Any, Any]] = {}  # (handle or sparse result function, context)
        self._fusion_bytes = _fusion_threshold()
        self._closes_bucket: set[torch.Tensor] = set()  # the last gradient of each fused bucket, in _order
        self._bucket: list[tuple[torch.Tensor, torch.Tensor, Any]] = []  # launched, not yet sent: (p, wire, context)
        # Each fused bucket's buffer, kept from step to step (keyed by its gradients); the gradients become views of it.
        self._fusion_buffers: dict[tuple[int, ...], torch.Tensor] = {}
        self._next = 0  # index into _order of the next gradient to launch
        self._hooks: list[Any] = []
        self._should_synchronize = True
        self._synchronized = False
        if not self._local:
            self._watch(p for group in optimizer.param_groups for p in group["params"])

    # The wrapped optimizer's state, seen and set through this object (load_state_dict replaces its containers).
    param_groups = _wrapped_attribute("param_groups")
    state = _wrapped_attribute("state")
    defaults = _wrapped_attribute("defaults")

    def __getattr__(self, name: str) -> Any:
        # Optimizer's own methods reach for private attributes (hook tables) set in its __init__.
        if name == "_optimizer":
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def _watch(self, parameters: Iterable[torch.Tensor]) -> None:
        fresh = [p for p in parameters if p.requires_grad and p not in self._delay]
        # NOTE: torch.distributed pairs collectives by call order, not by name as Horovod's
        # coordinator does, so every rank must launch the gradients' all-reduces in one fixed
        # order. Backward reaches the last layers first, hence the reversed parameter order.
        self._order = list(reversed(fresh)) + self._order
        self._fusion_buffers = {}
        for p in fresh:
            self._delay[p] = self._backward_passes_per_step
            self._hooks.append(p.register_post_accumulate_grad_hook(self._on_gradient))
        self._plan_buckets()

    def _plan_buckets(self) -> None:
        """Buckets consecutive gradients of ``_order`` (one all-reduce each) by threshold and wire dtype.

        The plan depends only on order, shapes and dtypes, so every rank makes the same one.
        """
        self._closes_bucket = set()
        size, dtype = 0, None
        for previous, p in zip([None, *self._order], self._order):
            wire = self._wire_dtype(p)
            nbytes = p.numel() * wire.itemsize
            if previous is not None and (wire != dtype or size + nbytes > self._fusion_bytes):
                self._closes_bucket.add(previous)
                size = 0
            size, dtype = size + nbytes, wire
        if self._order:
            self._closes_bucket.add(self._order[-1])

    def _on_gradient(self, p: torch.Tensor) -> None:
        if p.grad is not None and p.grad.requires_grad:
            raise RuntimeError("DistributedOptimizer does not support backward(create_graph=True): the gradients "
                               "it all-reduces must not require grad.")
        if self._delay[p] == 0:
            raise RuntimeError(f"Gradients of {self._names.get(p, 'a parameter')!r} were computed more than "
                               f"backward_passes_per_step={self._backward_passes_per_step} times before step(): the "
                               "extra pass would miss the all-reduce. Raise backward_passes_per_step, or call step() "
                               "(or synchronize()) after every backward_passes_per_step backward passes.")
        self._delay[p] -= 1
        # Launch every gradient that is ready and next in the fixed order.
        while self._next < len(self._order) and self._delay[self._order[self._next]] == 0:
            self._launch(self._order[self._next])

    def _launch(self, p: torch.Tensor) -> None:
        if self._next == 0:
            self._check_step()
        if p.grad is None:  # unused on this rank, maybe used on another: every rank must send something
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse and self._sparse_as_dense:
            p.grad = p.grad.to_dense()
            self._densified.add(p)
        self._next += 1
        if p.grad.is_sparse:  # Horovod's sparse path (all-gathers), started after the dense gradients
            self._sparse.add(p)
            self._handles[p] = (None, None)
        else:
            compressed, context = self._compression.compress(p.grad)
            self._bucket.append((p, compressed, context))
        if p in self._closes_bucket:
            self._send_bucket()

    def _send_bucket(self) -> None:
        """Starts one all-reduce for the bucket's gradients: in place, in one fused buffer when there are several."""
        bucket, self._bucket = self._bucket, []
        if not bucket:
            return
        buffer = bucket[0][1] if len(bucket) == 1 else self._fill_fusion_buffer(bucket)
        prescale, postscale = (1.0 / self._predivide, self._predivide) if self._op is ops.Average else (1.0, 1.0)
        works, finish = ops.start_allreduce(buffer, self._op, prescale_factor=prescale, postscale_factor=postscale,
                                            process_set=self._process_set, checked=True)
        handle = _handles.register("allreduce", works, finish)
        offset = 0
        for p, wire, context in bucket:
            self._handles[p] = (handle, (slice(offset, offset + wire.numel()), wire.shape, context, len(bucket) > 1))
            offset += wire.numel()

    def _fill_fusion_buffer(self, bucket: list[tuple[torch.Tensor, torch.Tensor, Any]]) -> torch.Tensor:
        """The bucket's buffer holding its gradients; uncompressed ones become views of it (no copy back, as DDP)."""
        key = tuple(id(p) for p, _, _ in bucket)
        size = sum(wire.numel() for _, wire, _ in bucket)
        buffer = self._fusion_buffers.get(key)
        if buffer is None or buffer.numel() != size or buffer.dtype != bucket[0][1].dtype:
            buffer = self._fusion_buffers[key] = torch.empty(size, dtype=bucket[0][1].dtype)
        offset = 0
        for p, wire, _ in bucket:
            view = buffer[offset:offset + wire.numel()].view(wire.shape)
            offset += wire.numel()
            if wire.data_ptr() == view.data_ptr():
                continue
            view.copy_(wire)
            # NOTE: like DDP, .grad is replaced by its view (a new tensor object) when it is an uncompressed,
            # contiguous gradient of this parameter; others are copied back after the all-reduce.
            if wire is p.grad and wire.is_contiguous() and p.is_contiguous():
                p.grad = view
        return buffer

    def _check_step(self) -> None:
        """Checks this step's all-reduces with the other ranks once (count, checksum of shapes and dtypes).

        A mismatch raises ``HorovodInternalError`` on every rank before any gradient moves; a rank inside
        ``hvd.join()`` learns it must take part with zeros (``_stand_in``).
        """
        members = self._process_set.size()
        if members == 1:
            return
        dense = [p for p in self._order if p not in self._sparse]
        # The fusion threshold too: ranks that bucket differently would send all-reduces of different sizes.
        signature = [(tuple(p.shape), str(self._wire_dtype(p))) for p in dense] + [
            self._op.value, self._predivide, self._fusion_bytes]
        checksum = zlib.crc32(repr(signature).encode())
        _negotiation.register_gradient_stand_in(checksum, self._stand_in)
        call = Call(Kind.GRADIENTS, shape=(len(dense), checksum), op=list(ops.ReduceOp).index(self._op))
        _negotiation.negotiate(call, basics.group_of(self._process_set), members)

    def _wire_dtype(self, p: torch.Tensor) -> torch.dtype:
        return _negotiation.wire_dtype(self._compression.compress(torch.zeros(0, dtype=p.dtype))[0].dtype)

    def _stand_in(self) -> None:
        """A joined rank's part in another rank's step: zeros for each dense gradient, in the same order."""
        wire_op = _negotiation.WIRE_OPS[ops._WIRE_OP[self._op]]
        group = basics.group_of(self._process_set)
        size = 0
        for p in self._order:
            if p not in self._sparse:
                size += p.numel()
            if p in self._closes_bucket and size:  # one all-reduce per bucket, as the training ranks send
                dist.all_reduce(torch.zeros(size, dtype=self._wire_dtype(p)), op=wire_op, group=group)
                size = 0

    def synchronize(self) -> None:
        """Waits for every gradient's all-reduce (starting those not yet started) and writes the results to ``.grad``."""
        while self._next < len(self._order):
            self._launch(self._order[self._next])
        self._send_bucket()  # nothing left here after the last launch; kept for a plan changed mid-step
        for p in self._order:  # sparse gradients last, in the same order on every rank
            if self._handles[p][0] is None:
                self._handles[p] = (grouped.sparse_allreduce_async(p.grad, None, self._op,  # type: ignore[arg-type]
                                                                   self._process_set), None)
        reduced_buffers: dict[int, torch.Tensor] = {}
        for p in self._order:
            handle, part = self._handles.pop(p)
            if callable(handle):  # a sparse gradient: the result replaces it
                p.grad = handle()
            else:
                if handle not in reduced_buffers:
                    reduced_buffers[handle] = ops.synchronize(handle)
                span, shape, context, fused = part
                wire = reduced_buffers[handle][span].view(shape) if fused else reduced_buffers[handle]
                reduced = self._compression.decompress(wire, context)
                if reduced is not p.grad and reduced.data_ptr() != p.grad.data_ptr():  # type: ignore[union-attr]
                    p.grad.copy_(reduced)  # type: ignore[union-attr]
                if p in self._densified:  # back to sparse, as Horovod: a sparse-only optimizer (SparseAdam) steps
                    p.grad = p.grad.to_sparse()  # type: ignore[union-attr]
                    self._densified.discard(p)
            self._delay[p] = self._backward_passes_per_step
        self._next = 0
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Within this block ``step()`` does not synchronize: call ``synchronize()`` yourself before it.

        Example:
            >>> optimizer.synchronize()  # doctest: +SKIP
            >>> torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # doctest: +SKIP
            >>> with optimizer.skip_synchronize():  # doctest: +SKIP
            ...     optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Callable[[], float] | None = None) -> Any:  # type: ignore[override]
        """Synchronizes the gradients (unless in ``skip_synchronize``), then steps the wrapped optimizer."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(): the gradients are all-reduced a second time, which costs "
                              "time. Wrap step() in `with optimizer.skip_synchronize():` after synchronize().",
                              stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return self._optimizer.step(closure) if closure is not None else self._optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears the gradients; refused while their all-reduces are in flight."""
        if self._handles or self._bucket:
            raise RuntimeError("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
                               "optimizer.synchronize(): all-reduces still writing into the gradients would race with "
                               "it. Call zero_grad() before backward, or after step().")
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a parameter group to the wrapped optimizer and all-reduces its gradients too."""
        self._optimizer.add_param_group(param_group)
        if not self._local:
            self._watch(self._optimizer.param_groups[-1]["params"])

    def state_dict(self) -> dict[str, Any]:
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self._optimizer!r})"


FUSION_THRESHOLD_ENV = "HOROVOD_FUSION_THRESHOLD"
_DEFAULT_FUSION_BYTES = 32 * 1024 * 1024


def _fusion_threshold() -> int:
    """Most bytes one fused all-reduce carries (Horovod's ``HOROVOD_FUSION_THRESHOLD``; 0: one per gradient)."""
    return number_from_env(FUSION_THRESHOLD_ENV, _DEFAULT_FUSION_BYTES, zero_allowed=True,
                           meaning="the most bytes one fused all-reduce carries (0 sends each gradient on its own)")


def _parameter_names(optimizer: torch.optim.Optimizer,
                     named_parameters: Iterable[tuple[str, torch.nn.Parameter]] | None) -> dict[torch.Tensor, str]:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if named_parameters is None:
        return {p: f"allreduce.noname.{i}" for i, p in enumerate(params)}
    pairs = list(named_parameters)
    if not all(isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) for pair in pairs):
        raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, usually "
                         "model.named_parameters(). Received: " + repr([type(p).__name__ for p in pairs[:3]]))
    names = [name for name, _ in pairs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"Parameter names in named_parameters must be unique. Received duplicates: {duplicates}")
    named: dict[torch.Tensor, str] = {p: name for name, p in pairs}
    unnamed = [i for i, p in enumerate(params) if p not in named]
    if unnamed:
        raise ValueError("named_parameters was given, but some of the optimizer's parameters are not in it, so "
                         "their gradients could not be matched. Pass the named_parameters of the model the "
                         f"optimizer trains. Received: unnamed optimizer parameter indexes={unnamed[:10]}")
    return named
