"""A parameter server: holds variables (or shards of them) and their optimizer state.

gRPC (``grpcio``) with raw-bytes methods carrying ``ps.wire`` messages, bound only to the address it is given. A
call without a proof of the job's secret is refused ``UNAUTHENTICATED`` before decoding and counted (``auth``); a
malformed request, or a hyperparameter the torch optimizer rejects, gets ``INVALID_ARGUMENT`` and the server goes
on. Pushes are applied as they arrive by a torch optimizer kept here, one per variable, built from the spec the
first push names (Adam's moments live here, not on the workers); each bumps the server's ``version``. A push carries
its scheduled step's id, and a step already applied is refused, so a step re-run after its worker died is applied
once; one computed from values more than ``staleness`` versions old is dropped and counted.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import threading
from typing import Any

import torch

from stratagem.distribute.ps import rpc, wire
from stratagem.distribute.ps.auth import Credentials
from stratagem.optimizers import fused_adam, rules

SERVICE = "stratagem.ParameterServer"
METHODS = ("Create", "Pull", "Push", "Snapshot", "Restore", "Stats")
# The optimizers a server builds: torch's, and the Keras rules that stratagem.optimizers build. Each keeps per-element
# state, so a variable cut into shards steps exactly as the whole variable would (clipnorm aside: it clips each shard
# by its own norm).
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    cls.__name__: cls for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad,
                                  torch.optim.RMSprop, rules.KerasSGD, rules.KerasRMSprop, rules.KerasAdagrad,
                                  rules.KerasAdadelta, rules.KerasAdamax, rules.KerasNadam, rules.KerasLion,
                                  fused_adam.KerasAdam)}


class ParameterServer:
    """Serves the parameter-server methods on ``address`` (``host:port``; port 0 picks one).

    Args:
        address: ``host:port`` to bind; beyond loopback only with a key in ``credentials``.
        max_workers: Threads answering calls.
        credentials: The job's key (calls without its proof are refused) and TLS files; default: none, loopback
            only.

    Example:
        >>> server = ParameterServer("127.0.0.1:0")  # doctest: +SKIP
        >>> server.start(); print(server.address)  # doctest: +SKIP
    """

    def __init__(self, address: str, *, max_workers: int = 8, credentials: Credentials | None = None) -> None:
        self._variables: dict[str, torch.nn.Parameter] = {}
        self._optimizers: dict[str, tuple[dict[str, Any], torch.optim.Optimizer]] = {}
        self.version = 0
        self.pushes_applied = 0
        self.applied_steps: set[int] = set()
        self.duplicates_refused = 0
        self.stale_dropped = 0
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        handlers = {name: getattr(self, f"_{name.lower()}") for name in METHODS}
        self._server, port, self._guard = rpc.start_server(address, SERVICE, handlers, max_workers=max_workers,
                                                           what="The parameter server", credentials=credentials)
        host = address.rsplit(":", 1)[0]
        self.address = f"{host}:{port}"

    def start(self) -> ParameterServer:
        self._server.start()
        return self

    def stop(self, grace_s: float = 1.0) -> None:
        self._server.stop(grace_s).wait(grace_s + 1)
        self.stopped.set()

    @property
    def unauthenticated_refused(self) -> int:
        """Calls refused because they carried no valid proof of the job's secret."""
        return self._guard.refused

    # ---- methods (bytes in, bytes out) --------------------------------------------
    def _create(self, request: bytes, context: Any) -> bytes:
        """Sets each variable to the value sent (the chief's), dropping any optimizer state it had."""
        tensors, _ = rpc.decode(request, context)
        with self._lock:
            for name, value in tensors.items():
                self._variables[name] = torch.nn.Parameter(value)  # a fresh copy from decoding
                self._optimizers.pop(name, None)
        return wire.encode({}, {"created": sorted(tensors), "version": self.version})

    def _pull(self, request: bytes, context: Any) -> bytes:
        _, meta = rpc.decode(request, context)
        names = meta.get("names")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            rpc.refuse(context, f"Pull needs meta.names, a list of strings. Received: {names!r}")
        with self._lock:  # encoding copies the bytes: done under the lock, no clone needed
            self._check_known(names, context)
            return wire.encode({name: self._variables[name].detach() for name in names}, {"version": self.version})

    def _push(self, request: bytes, context: Any) -> bytes:
        gradients, meta = rpc.decode(request, context)
        step, base, staleness = (meta.get(key) for key in ("step", "base_version", "staleness"))
        for key, value in (("step", step), ("base_version", base), ("staleness", staleness)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                rpc.refuse(context, f"Push meta.{key} must be a non-negative int or absent. Received: {value!r}")
        spec = _check_spec(meta.get("optimizer", {"class": "SGD", "hyper": {"lr": 0.01}}), context)
        with self._lock:
            self._check_known(list(gradients), context)
            for name, grad in gradients.items():
                variable = self._variables[name]
                if grad.shape != variable.shape or grad.dtype != variable.dtype:
                    rpc.refuse(context, f"Gradient for {name!r} is {grad.dtype}{list(grad.shape)}, but the variable is "
                                     f"{variable.dtype}{list(variable.shape)}")
            if step is not None and step in self.applied_steps:
                self.duplicates_refused += 1
                return wire.encode({}, {"applied": False, "duplicate": True, "version": self.version})
            if staleness is not None and base is not None and self.version - base > staleness:
                self.stale_dropped += 1
                return wire.encode({}, {"applied": False, "stale": True, "version": self.version})
            optimizers = [self._optimizer(name, spec, context) for name in gradients]
            for (name, grad), optimizer in zip(gradients.items(), optimizers):  # all checked first: whole or nothing
                variable = self._variables[name]
                variable.grad = grad
                optimizer.step()
                variable.grad = None
            self.version += 1
            self.pushes_applied += 1
            if step is not None:
                self.applied_steps.add(step)
            return wire.encode({}, {"applied": True, "version": self.version})

    def _snapshot(self, request: bytes, context: Any) -> bytes:
        """Every variable, optimizer state and version as one message (not applied step ids: those restart)."""
        rpc.decode(request, context)
        with self._lock:  # encoding copies the bytes: done under the lock, no clones needed
            tensors: dict[str, torch.Tensor] = {f"var/{n}": v.detach() for n, v in self._variables.items()}
            optimizers: dict[str, Any] = {}
            for name, (spec, optimizer) in self._optimizers.items():
                scalars = {}
                for key, value in optimizer.state[self._variables[name]].items():
                    if isinstance(value, torch.Tensor):
                        tensors[f"opt/{name}/{key}"] = value.detach()
                    else:
                        scalars[key] = value
                optimizers[name] = {"spec": spec, "scalars": scalars}
            meta = {"version": self.version, "pushes_applied": self.pushes_applied, "optimizers": optimizers}
            return wire.encode(tensors, meta)

    def _restore(self, request: bytes, context: Any) -> bytes:
        """Replaces everything with a ``Snapshot`` reply's content."""
        tensors, meta = rpc.decode(request, context)
        optimizers = meta.get("optimizers", {})
        if not isinstance(optimizers, dict) or not isinstance(meta.get("version"), int):
            rpc.refuse(context, "Restore needs meta.version (int) and meta.optimizers (object)")
        # Decoded tensors are fresh, writable copies already: no clone.
        variables = {k[4:]: torch.nn.Parameter(v) for k, v in tensors.items() if k.startswith("var/")}
        built = {}
        for name, entry in optimizers.items():
            if name not in variables or not isinstance(entry, dict):
                rpc.refuse(context, f"Restore: optimizer state for {name!r}, which is not a variable of the snapshot")
            spec = _check_spec(entry.get("spec"), context)
            optimizer = _build(spec, variables[name], context)
            state = dict(entry.get("scalars", {}))
            prefix = f"opt/{name}/"
            state.update({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)})
            optimizer.state[variables[name]].update(state)
            built[name] = (spec, optimizer)
        with self._lock:
            self._variables, self._optimizers = variables, built
            # A restored job numbers its steps afresh: the ids of the snapshot's steps are spent.
            self.version, self.applied_steps = int(meta["version"]), set()
            self.pushes_applied = int(meta.get("pushes_applied", 0))
        return wire.encode({}, {"restored": sorted(variables), "version": self.version})

    def _stats(self, request: bytes, context: Any) -> bytes:
        rpc.decode(request, context)
        with self._lock:
            return wire.encode({}, {
                "version": self.version, "pushes_applied": self.pushes_applied,
                "applied_steps": sorted(self.applied_steps), "duplicates_refused": self.duplicates_refused,
                "highest_step": max(self.applied_steps, default=-1),
                "stale_dropped": self.stale_dropped, "variables": sorted(self._variables),
                "unauthenticated_refused": self.unauthenticated_refused,
            })

    # ---- helpers ----------------------------------------------------------------------
    def _optimizer(self, name: str, spec: dict[str, Any], context: Any) -> torch.optim.Optimizer:
        held = self._optimizers.get(name)
        if held is None or held[0]["class"] != spec["class"]:
            held = (spec, _build(spec, self._variables[name], context))
            self._optimizers[name] = held
        optimizer = held[1]
        group = optimizer.param_groups[0]
        for key, value in spec["hyper"].items():  # e.g. a learning rate changed by a schedule
            if key in group:
                group[key] = tuple(value) if isinstance(group[key], tuple) else value
        self._optimizers[name] = (spec, optimizer)
        return optimizer

    def _check_known(self, names: list[str], context: Any) -> None:
        unknown = [n for n in names if n not in self._variables]
        if unknown:
            rpc.refuse(context, f"Unknown variable(s) {unknown}. This server holds {sorted(self._variables)}.")


def optimizer_spec(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The JSON spec a server builds ``optimizer``'s twin from: class name and first group's hyperparameters."""
    name = type(optimizer).__name__
    if name not in OPTIMIZERS:
        raise ValueError(f"Parameter servers run the optimizers {sorted(OPTIMIZERS)}. Received: {name}")
    group = optimizer.param_groups[0]
    accepted = _constructor_arguments(name)
    hyper = {}
    for key, value in group.items():
        if key == "params" or key not in accepted:
            continue
        if isinstance(value, torch.Tensor):
            value = value.item()
        if isinstance(value, tuple):
            value = list(value)
        if value is None or isinstance(value, (bool, int, float, str, list)):
            hyper[key] = value
    return {"class": name, "hyper": hyper}


@functools.cache
def _constructor_arguments(name: str) -> frozenset[str]:
    """What ``OPTIMIZERS[name]`` accepts, with ``KerasRule``'s for a Keras rule (cached: pushes ask every step)."""
    cls = OPTIMIZERS[name]
    classes = (cls, rules.KerasRule) if issubclass(cls, rules.KerasRule) else (cls,)
    return frozenset(argument for c in classes for argument in inspect.signature(c.__init__).parameters)


def _check_spec(spec: Any, context: Any) -> dict[str, Any]:
    """``spec`` if a server can step with it: known class, plain non-negative numbers its optimizer accepts."""
    if not isinstance(spec, dict) or spec.get("class") not in OPTIMIZERS or not isinstance(spec.get("hyper"), dict):
        rpc.refuse(context, f"meta.optimizer must be {{'class': one of {sorted(OPTIMIZERS)}, 'hyper': {{...}}}}. "
                         f"Received: {str(spec)[:200]}")
    for key, value in spec["hyper"].items():
        numbers = value if isinstance(value, list) else [value]
        if value is None or isinstance(value, bool):
            continue
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
            rpc.refuse(context, f"Optimizer hyperparameter {key} must be a number (or a list of numbers). "
                             f"Received: {key}={str(value)[:100]!r}")
        if not all(math.isfinite(v) for v in numbers):
            rpc.refuse(context, f"Optimizer hyperparameter {key} must be finite. Received: {key}={value}")
        # Every numeric hyperparameter of these optimizers (rates, decays, moments, clips) is >= 0.
        if any(v < 0 for v in numbers):
            rpc.refuse(context, f"Optimizer hyperparameter {key} must be non-negative. Received: {key}={value}")
    problem = _constructor_problem(json.dumps(spec, sort_keys=True))
    if problem is not None:  # the optimizer's own checks (e.g. Adam's betas below 1), also for a held optimizer
        rpc.refuse(context, problem)
    return spec


@functools.lru_cache(maxsize=256)
def _constructor_problem(spec_json: str) -> str | None:
    """Why ``OPTIMIZERS[class](**hyper)`` refuses the spec, or None; asked once per distinct spec."""
    spec = json.loads(spec_json)
    accepted = _constructor_arguments(spec["class"])
    hyper = {k: (tuple(v) if isinstance(v, list) else v) for k, v in spec["hyper"].items() if k in accepted}
    try:
        OPTIMIZERS[spec["class"]]([torch.nn.Parameter(torch.zeros(1))], **hyper)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError) as err:
        return f"Cannot build {spec['class']} with {hyper}: {err}"
    return None


def _build(spec: dict[str, Any], variable: torch.nn.Parameter, context: Any) -> torch.optim.Optimizer:
    cls = OPTIMIZERS[spec["class"]]
    accepted = _constructor_arguments(spec["class"])
    hyper = {k: (tuple(v) if isinstance(v, list) else v) for k, v in spec["hyper"].items() if k in accepted}
    try:
        return cls([variable], **hyper)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError) as err:
        rpc.refuse(context, f"Cannot build {spec['class']} with {hyper}: {err}")
