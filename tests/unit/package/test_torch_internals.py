"""The torch adapter (stratagem/_torch_internals.py) against the installed torch: its version, and each private it uses.

A failure here after a torch upgrade names the private that moved; fix it in the adapter, then raise
``WRITTEN_FOR`` and pyproject.toml's range together.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import subprocess
import sys
import textwrap
import time
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from stratagem import _torch_internals as internals
from stratagem.optimizers.fused_adam import KerasAdam
from stratagem.optimizers.rules import KerasRule


def test_installed_torch_is_the_release_the_adapter_was_written_for() -> None:
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    assert release == internals.WRITTEN_FOR, (
        f"torch {torch.__version__} is installed, stratagem/_torch_internals.py was written for "
        f"{internals.WRITTEN_FOR}: check every section there, then update WRITTEN_FOR and pyproject.toml")


def test_deferred_dynamo_optimizer_overrides_exactly_the_methods_torch_disable_dynamo_wraps() -> None:
    # A torch upgrade that wraps another Optimizer method (or none of these) fails here.
    wrapper_code = torch._disable_dynamo(lambda: None).__code__
    wrapped = {name for name, value in vars(torch.optim.Optimizer).items()
               if getattr(value, "__code__", None) is wrapper_code}
    assert wrapped == set(internals.DYNAMO_DISABLED_OPTIMIZER_METHODS)
    assert [f.__name__ for f in internals.undecorated_optimizer_methods()] == list(
        internals.DYNAMO_DISABLED_OPTIMIZER_METHODS)
    overridden = {name for name, value in vars(internals.DeferredDynamoOptimizer).items() if callable(value)}
    assert overridden == wrapped
    # Every stratagem class built on it reaches torch.optim.Optimizer's own methods next (the undecorated function
    # called while torch._dynamo is not imported is that class's): a torch.optim class overriding one fails here.
    for cls in (KerasRule, KerasAdam):
        mro = cls.__mro__[cls.__mro__.index(internals.DeferredDynamoOptimizer) + 1:]
        for name in wrapped:
            assert next(c for c in mro if name in vars(c)) is torch.optim.Optimizer, (cls, name)


# A fresh interpreter (torch._dynamo not imported yet). Importing stratagem changes no torch object; Model.fit with
# SGD and with Adam, and two Adam steps (again once torch._dynamo is imported: the same weights), import no
# torch._dynamo; then torch.compile of a function that calls zero_grad and state_dict, with torch's SGD and with
# stratagem's: the same graph breaks and results (stratagem's overrides add traced frames of their own).
_FIT_THEN_COMPILE = textwrap.dedent("""
    import json, sys, torch
    finders_before = list(sys.meta_path)
    import stratagem, stratagem.optimizers
    from torch import nn
    from stratagem.optimizers.fused_adam import KerasAdam
    from stratagem.optimizers.rules import KerasSGD

    undecorated = [getattr(torch.optim.Optimizer, name).__wrapped__
                   for name in ("add_param_group", "zero_grad", "state_dict", "load_state_dict")]
    untouched = {"caches": [sorted(k for k in vars(f) if "dynamo" in k) for f in undecorated],
                 "finders": [type(f).__module__ for f in sys.meta_path if f not in finders_before]}

    for name in ("sgd", "adam"):  # a Keras rule's own step; torch's fused AdamW step through builtin_step
        model = stratagem.Model(nn.Linear(4, 2))
        model.compile(optimizer=name, loss="mse")
        model.fit(torch.zeros(8, 4), torch.zeros(8, 2), batch_size=4, epochs=1, verbose=0)
        optimizer = model.optimizer.torch_optimizer
        optimizer.load_state_dict(optimizer.state_dict())

    def adam_steps():  # fused and per-tensor kernels: the latter refuses in-place updates of a leaf with autograd on
        weights = [nn.Parameter(torch.arange(4.0)) for fused in (True, False)]
        adams = [KerasAdam([weight], lr=0.1, fused=fused) for weight, fused in zip(weights, (True, False))]
        for grad in (1.0, -2.0):
            for weight, adam in zip(weights, adams):
                weight.grad = torch.full((4,), grad)
                adam.step()
        return [weight.tolist() for weight in weights]

    adam_without_dynamo = adam_steps()
    imported_by_fit = "torch._dynamo" in sys.modules
    untouched["caches_after_fit"] = [sorted(k for k in vars(f) if "dynamo" in k) for f in undecorated]

    import torch._dynamo
    from torch._dynamo.utils import counters

    runs = {}
    for label, optimizer_class in (("stratagem", KerasSGD), ("torch", torch.optim.SGD)):
        weight = nn.Parameter(torch.ones(3))
        sgd = optimizer_class([weight], lr=0.5)

        def step(x):
            y = x * 2
            sgd.zero_grad()
            return y + sgd.state_dict()["param_groups"][0]["lr"]

        torch._dynamo.reset()
        counters.clear()
        weight.grad = torch.ones(3)
        explained = torch._dynamo.explain(step)(torch.ones(3))
        runs[label] = {"frames": counters["frames"]["total"], "breaks": explained.graph_break_count,
                       "reasons": [str(r.reason).split(chr(10))[0] for r in explained.break_reasons],
                       "grad_cleared": weight.grad is None,
                       "out": torch.compile(step, backend="eager")(torch.ones(3)).tolist()}
    adam_same = adam_steps() == adam_without_dynamo  # torch's own step wrapper now, graph breaks and all
    caches = [getattr(f, "__dynamo_disable", None) for f in undecorated[1:3]]
    print(json.dumps({"imported_by_fit": imported_by_fit, "untouched": untouched, "runs": runs,
                      "adam_same": adam_same,
                      "torch_disables": [getattr(c, "_torchdynamo_disable", False) for c in caches]}))
""")


def test_fit_imports_no_dynamo_and_compile_still_disables_the_optimizer_methods() -> None:
    result = subprocess.run([sys.executable, "-c", _FIT_THEN_COMPILE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    # No torch object changed by importing stratagem or fitting: no disable cached on torch's functions, no finder.
    assert report["untouched"] == {"caches": [[]] * 4, "finders": [], "caches_after_fit": [[]] * 4}, report
    # Without DeferredDynamoOptimizer the optimizer's constructor (add_param_group) imports torch._dynamo (~1.3 s of
    # CPU), without builtin_step Adam's step does.
    assert report["imported_by_fit"] is False
    assert report["adam_same"] is True
    ours, torchs = report["runs"]["stratagem"], report["runs"]["torch"]
    # The same graph break where torch disables, the same results; the frame count may differ (our override's frame
    # is traced before it calls torch's disabled method).
    assert {k: ours[k] for k in ("breaks", "grad_cleared", "out")} == {
        k: torchs[k] for k in ("breaks", "grad_cleared", "out")}, report["runs"]
    assert torchs["breaks"] == 1 and torchs["grad_cleared"] and torchs["out"] == [2.5, 2.5, 2.5], torchs
    assert report["torch_disables"] == [True, True]  # torch's own disable cached once torch._dynamo was imported


# Each multi-tensor op against the per-tensor op it stands for: (arguments after the list, per-tensor function).
_TWO = [torch.tensor([1.0, -4.0]), torch.tensor([9.0])]
_OTHER = [torch.tensor([2.0, 2.0]), torch.tensor([3.0])]
_PER_TENSOR = {
    "abs": ((), torch.abs), "add": ((_OTHER,), torch.add), "add_": ((_OTHER,), torch.add),
    "addcdiv_": ((_OTHER, _OTHER), lambda t, a, b: torch.addcdiv(t, a, b)),
    "addcmul": ((_OTHER, _OTHER), lambda t, a, b: torch.addcmul(t, a, b)),
    "addcmul_": ((_OTHER, _OTHER), lambda t, a, b: torch.addcmul(t, a, b)),
    "clamp_max_": ((0.5,), lambda t, v: t.clamp(max=v)), "clamp_min": ((0.5,), lambda t, v: t.clamp(min=v)),
    "clamp_min_": ((0.5,), lambda t, v: t.clamp(min=v)), "div": ((_OTHER,), torch.div), "div_": ((_OTHER,), torch.div),
    "lerp": ((_OTHER, 0.25), torch.lerp), "lerp_": ((_OTHER, 0.25), torch.lerp),
    "maximum_": ((_OTHER,), torch.maximum), "mul": ((3.0,), torch.mul), "mul_": ((_OTHER,), torch.mul),
    "norm": ((), torch.linalg.vector_norm), "reciprocal_": ((), torch.reciprocal), "sign_": ((), torch.sign),
    "sqrt_": ((), lambda t: torch.sqrt(t)), "sub_": ((_OTHER,), torch.sub),
}


@pytest.mark.parametrize("name", internals.FOREACH_OPS)
def test_each_foreach_op_computes_its_per_tensor_op(name: str) -> None:
    args, per_tensor = _PER_TENSOR[name]
    inputs = [t.abs() if name == "sqrt_" else t.clone() for t in _TWO]
    expected = [per_tensor(t, *(a[i] if isinstance(a, list) else a for a in args)) for i, t in enumerate(inputs)]
    result = getattr(internals.foreach, name)(inputs, *args)
    got = inputs if name.endswith("_") else result  # in-place ops change their first list
    for value, want in zip(got, expected):
        torch.testing.assert_close(value, want)


def test_unscale_and_check_finite_scales_and_flags_inf() -> None:
    grads = [torch.tensor([2.0, 4.0]), torch.tensor([8.0])]
    found = torch.zeros(1)
    internals.unscale_and_check_finite_(grads, found, torch.full((1,), 0.5))
    torch.testing.assert_close(grads[0], torch.tensor([1.0, 2.0]))
    assert found.item() == 0.0
    internals.unscale_and_check_finite_([torch.tensor([float("inf")])], found, torch.full((1,), 0.5))
    assert found.item() == 1.0


def test_buffer_registry_holds_the_tensor_put_back() -> None:
    module = nn.Module()
    original = torch.zeros(2)
    module.register_buffer("stat", original)
    module.to(torch.float64)  # torch replaces a moved buffer with a new tensor
    moved = internals.registered_buffer(module, "stat")
    assert moved is not original and moved.dtype == torch.float64
    internals.put_buffer(module, "stat", original)
    assert module.stat is original and module.state_dict()["stat"].data_ptr() == original.data_ptr()


class _Doubler(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + x.shape[0]


def _exported() -> torch.export.ExportedProgram:
    batch = torch.export.Dim("batch")
    return torch.export.export(_Doubler(), (torch.zeros(2, 3),), dynamic_shapes=({0: batch},))


def test_exported_program_keeps_guards_code_that_drop_guards_code_empties() -> None:
    program = _exported()
    assert isinstance(program._guards_code, list)  # the attribute ExportedProgram.module() exec's
    internals.drop_guards_code(program)
    assert program._guards_code == []
    torch.testing.assert_close(program.module()(torch.ones(4, 3)), torch.sin(torch.ones(4, 3)) * 2 + 4)


def test_aten_overloads_are_recognized() -> None:
    assert internals.is_aten_overload(torch.ops.aten.add.Tensor)
    assert not internals.is_aten_overload(torch.add)
    assert not internals.is_aten_overload(torch.ops.aten.add)  # the packet, not an overload


def test_pt2_archive_layout_is_what_torch_export_save_writes(tmp_path: Path) -> None:
    program = _exported()
    program.example_inputs = None
    internals.drop_guards_code(program)
    torch.export.save(program, str(tmp_path / "model.pt2"))
    with zipfile.ZipFile(tmp_path / "model.pt2") as archive:
        names = archive.namelist()
        prefix = names[0].split("/", 1)[0] + "/"
        entries = [name.removeprefix(prefix) for name in names]
        graph = archive.read(prefix + "models/model.json").decode()
    assert [e for e in entries if not internals.PT2_ENTRY.fullmatch(e)] == []
    assert set(internals.PT2_REQUIRED) <= set(entries)
    targets = set(re.findall(r'"target": "([^"]+)"', graph))
    assert "torch.ops.aten.sin.default" in targets
    assert all(t.startswith("torch.ops.aten.") or t in internals.PT2_SYMBOLIC_TARGETS for t in targets), targets


def test_dcp_metadata_names_only_the_listed_globals(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    state = {"weight": torch.ones(3), "extra": {"lr": 0.5, "name": "adam"}}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process: intended
        dcp.save(state, checkpoint_id=tmp_path, no_dist=True)
    assert (tmp_path / internals.dcp_metadata_file(None)).is_file()
    assert internals.dcp_metadata_file(3) == "__3.metadata"

    named: set[tuple[str, str]] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            named.add((module, name))
            return super().find_class(module, name)

    Recording(io.BytesIO((tmp_path / internals.DCP_METADATA_FILE).read_bytes())).load()
    assert named and named <= internals.DCP_METADATA_GLOBALS, named - internals.DCP_METADATA_GLOBALS
    import importlib

    for module, name in internals.DCP_METADATA_GLOBALS:  # every listed name still exists where the list says
        if name.startswith("float8_e8m0") and not hasattr(torch, name):
            continue
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"



def test_stop_rendezvous_heartbeats_ends_the_keep_alive_timer_thread() -> None:
    import datetime
    import threading

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
    from torch.distributed.elastic.rendezvous.utils import _PeriodicTimer

    handler = DynamicRendezvousHandler.__new__(DynamicRendezvousHandler)  # only the timer is needed
    handler._keep_alive_timer = None  # before the first round
    internals.stop_rendezvous_heartbeats(handler, timeout_s=1.0)
    handler._keep_alive_timer = _PeriodicTimer(datetime.timedelta(milliseconds=10), lambda: None)
    handler._keep_alive_timer.start()
    thread = handler._keep_alive_timer._thread
    assert thread is not None and thread.is_alive()
    internals.stop_rendezvous_heartbeats(handler, timeout_s=5.0)
    assert not thread.is_alive()
    # A keep-alive call that does not return (an unreachable store) is waited for at most timeout_s.
    release = threading.Event()
    handler._keep_alive_timer = _PeriodicTimer(datetime.timedelta(milliseconds=1), release.wait)
    handler._keep_alive_timer.start()
    stuck = handler._keep_alive_timer._thread
    time.sleep(0.05)  # inside the call
    started = time.monotonic()
    internals.stop_rendezvous_heartbeats(handler, timeout_s=0.2)
    assert 0.15 < time.monotonic() - started < 2.0 and stuck.is_alive()
    release.set()
    stuck.join(5.0)
    assert not stuck.is_alive()  # the stop event ends it after the call
