"""Model.save / load_model: exact predictions, no class needed, metadata, atomic replace, refused files.

Chief-only writing is checked by faking a non-chief strategy; the real multi-process
case needs no process group here because save_model only reads ``is_chief``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

import stratagem
from stratagem.checkpoint import io as checkpoint_io
from stratagem.errors import CheckpointError
from stratagem.models import load_model, saving

_REPO_ROOT = Path(__file__).resolve().parents[3]


class _TinyConvNet(nn.Module):
    """Defined here on purpose: loading must not need this class."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(4 * 3 * 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class _TwoInputNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(5, 3), nn.Linear(2, 3)

    def forward(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        mixed = self.a(inputs["a"]) + self.b(inputs["b"])
        return mixed, mixed.softmax(dim=1)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))


def _data(kind: str, n: int = 50) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6) if kind == "mlp" else (n, 1, 8, 8)).astype(np.float32)
    return x, rng.integers(0, 3, n)


def _trained(kind: str) -> tuple[stratagem.Model, np.ndarray]:
    torch.manual_seed(0)
    model = stratagem.Model(_mlp() if kind == "mlp" else _TinyConvNet())
    model.compile(optimizer="adam", loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y = _data(kind)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # moves batch-norm statistics off their defaults
    return model, x


def _saved(kind: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, stratagem.Model]:
    model, x = _trained(kind)
    folder = tmp_path_factory.mktemp("saved") / kind
    model.save(str(folder))
    return folder, x, model


# Trained and saved once per module (training dominates the run time); tests only read
# them, or damage a copy of the folder.
@pytest.fixture(scope="module")
def saved_mlp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, stratagem.Model]:
    return _saved("mlp", tmp_path_factory)


@pytest.fixture(scope="module")
def saved_cnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, stratagem.Model]:
    return _saved("cnn", tmp_path_factory)


def _called_mlp() -> stratagem.Model:
    """An untrained MLP that has seen one batch, so it knows its input shapes."""
    torch.manual_seed(0)
    model = stratagem.Model(_mlp())
    model(torch.zeros(2, 6))
    return model


def _copy_of(saved: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    copy.mkdir()
    for file in saved.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    return copy


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_loaded_model_predicts_like_the_original_to_the_last_bit_of_rounding(request: pytest.FixtureRequest,
                                                                             kind: str) -> None:
    folder, x, model = request.getfixturevalue(f"saved_{kind}")
    loaded = load_model(folder)
    for batch_size in (None, 7):  # 50 examples: batches of 32 + 18, and 7 * 7 + 1
        expected = model.predict(x, batch_size=batch_size, verbose=0)
        # NOTE: not bit-equal: on a one-row batch the exported program may run another CPU
        # kernel than eager torch does (seen: 1 ULP, 3e-8, on the same input and weights).
        np.testing.assert_allclose(loaded.predict(x, batch_size=batch_size), expected, rtol=1e-6, atol=1e-7)
    model.module.eval()
    with torch.no_grad():
        batch = torch.from_numpy(x[:5])
        np.testing.assert_array_equal(loaded(batch).numpy(), model(batch).numpy())


def test_dict_input_and_tuple_output_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = stratagem.Model(_TwoInputNet())
    rng = np.random.default_rng(0)
    x = {"a": rng.normal(size=(9, 5)).astype(np.float32), "b": rng.normal(size=(9, 2))}  # b: float64, cast
    expected = model.predict(x, batch_size=4, verbose=0)
    model.save(str(tmp_path / "saved"))
    loaded = load_model(tmp_path / "saved")
    spec = saving.TensorSpec
    assert loaded.input_spec == {"a": spec((5,), torch.float32), "b": spec((2,), torch.float32)}
    got = loaded.predict(x, batch_size=4)
    assert isinstance(got, tuple) and len(got) == 2
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="structure"):
        loaded.predict(x["a"])


def test_metadata_records_input_spec_compile_config_and_versions(saved_mlp: tuple) -> None:
    folder, _, _ = saved_mlp
    assert sorted(p.name for p in folder.iterdir()) == ["metadata.json", "model.pt2", "weights.safetensors"]
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["format_version"] == saving.FORMAT_VERSION
    assert metadata["input_spec"] == {"shape": [6], "dtype": "float32"}
    assert metadata["compile_config"] == {
        "optimizer": {"class_name": "Adam", "learning_rate": pytest.approx(0.001)},
        "loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"],
    }
    assert metadata["versions"] == {"stratagem": stratagem.__version__, "torch": torch.__version__,
                                    "python": ".".join(map(str, sys.version_info[:3]))}
    loaded = load_model(folder)
    assert loaded.metadata == metadata
    assert loaded.input_spec == saving.TensorSpec((6,), torch.float32)
    # The state dict is saved as is; source paths and lines are not.
    assert set(load_file(folder / "weights.safetensors")) == {"0.weight", "0.bias", "3.weight", "3.bias"}
    assert b"stack_trace" not in (folder / "model.pt2").read_bytes()


def test_weights_come_from_the_weights_file(saved_mlp: tuple, tmp_path: Path) -> None:
    folder, x, _ = saved_mlp
    copy = _copy_of(folder, tmp_path)
    weights = {name: tensor * 2 for name, tensor in load_file(copy / "weights.safetensors").items()}
    save_file(weights, copy / "weights.safetensors")
    reference = stratagem.Model(_mlp())
    reference.module.load_state_dict(weights)
    np.testing.assert_array_equal(load_model(copy).predict(x), reference.predict(x, verbose=0))


def test_save_without_input_shapes_raises_value_error(tmp_path: Path) -> None:
    model = stratagem.Model(_mlp())
    with pytest.raises(ValueError, match="Call the model on data first.*input_example.*Received:"):
        model.save(str(tmp_path / "saved"))
    with pytest.raises(ValueError, match="input_example"):
        model.save(str(tmp_path / "saved"), input_example=["not", "tensors"])
    assert not (tmp_path / "saved").exists()


@pytest.mark.parametrize("save_format", ["tf", "h5", "keras"])
def test_save_format_raises_value_error_naming_the_one_format_as_keras_3_refuses_it(
        tmp_path: Path, save_format: str) -> None:
    model = stratagem.Model(_mlp())
    model(torch.zeros(2, 6))
    with pytest.raises(ValueError, match=rf"`save_format` argument is deprecated in Keras 3.*model.pt2.*"
                                         rf"Remove save_format.*Received: save_format='{save_format}'"):
        model.save(str(tmp_path / "saved"), save_format=save_format)
    with pytest.raises(ValueError, match=r"not supported: \['overwrite_all'\]"):
        model.save(str(tmp_path / "saved"), overwrite_all=True)
    assert not (tmp_path / "saved").exists()


def test_input_example_or_a_call_gives_the_input_shapes(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(10, 6))  # float64: Model.predict casts it to float32
    model = stratagem.Model(_mlp())
    model.save(str(tmp_path / "from_example"), input_example=x[:2])
    np.testing.assert_array_equal(load_model(tmp_path / "from_example").predict(x), model.predict(x, verbose=0))
    called = stratagem.Model(_mlp())
    called(torch.zeros(3, 6))
    called.save(str(tmp_path / "from_call"))
    assert load_model(tmp_path / "from_call").input_spec == saving.TensorSpec((6,), torch.float32)


@pytest.mark.parametrize("atomic_exchange", [True, False])
def test_save_replaces_an_earlier_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, atomic_exchange: bool) -> None:
    if not atomic_exchange:  # platforms without renameat2 take the two-rename path
        monkeypatch.setattr(checkpoint_io, "_exchange", lambda a, b: False)
    model, x = _called_mlp(), _data("mlp")[0]
    model.save(str(tmp_path / "saved"))
    with torch.no_grad():
        for parameter in model.module.parameters():
            parameter.mul_(-1.0)
    model.save(str(tmp_path / "saved"))
    np.testing.assert_array_equal(load_model(tmp_path / "saved").predict(x), model.predict(x, verbose=0))
    assert [p.name for p in tmp_path.iterdir()] == ["saved"]  # no .tmp- or .old- folder left


def test_save_refuses_to_replace_a_folder_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep me")
    model = _called_mlp()
    with pytest.raises(ValueError, match="not a model saved by save_model.*Received: filepath="):
        model.save(str(tmp_path / "data"))
    assert (tmp_path / "data" / "precious.txt").read_text() == "keep me"


def test_failure_before_rename_keeps_the_earlier_save(saved_mlp: tuple, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder, x, trained = saved_mlp
    expected = trained.predict(x, verbose=0)
    copy = _copy_of(folder, tmp_path)
    model = _called_mlp()

    def crash(tmp: str) -> None:
        raise KeyboardInterrupt("interrupted before the rename")

    monkeypatch.setattr(checkpoint_io, "_BEFORE_RENAME_HOOK", [crash])
    with pytest.raises(KeyboardInterrupt):
        model.save(str(copy))
    np.testing.assert_array_equal(load_model(copy).predict(x), expected)
    assert [p.name for p in tmp_path.iterdir()] == ["copy"]


def test_only_the_chief_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _called_mlp()
    monkeypatch.setattr(type(model.distribute_strategy), "is_chief", property(lambda self: False))
    model.save(str(tmp_path / "saved"))
    assert not any(tmp_path.iterdir())


# ---- errors ------------------------------------------------------------------------
def test_missing_folder_raises_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist.*Received: filepath="):
        load_model(tmp_path / "nothing")


@pytest.mark.parametrize("name", ["metadata.json", "model.pt2", "weights.safetensors"])
def test_missing_file_raises_checkpoint_error_naming_it(saved_mlp: tuple, tmp_path: Path, name: str) -> None:
    copy = _copy_of(saved_mlp[0], tmp_path)
    (copy / name).unlink()
    with pytest.raises(CheckpointError, match=re.escape(name)):
        load_model(copy)


@pytest.mark.parametrize("name", ["metadata.json", "model.pt2", "weights.safetensors"])
def test_truncated_file_raises_checkpoint_error_naming_it(saved_mlp: tuple, tmp_path: Path, name: str) -> None:
    copy = _copy_of(saved_mlp[0], tmp_path)
    data = (copy / name).read_bytes()
    (copy / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=re.escape(name) + ".*(truncated or corrupt|format version)"):
        load_model(copy)


def test_other_format_version_raises_checkpoint_error(saved_mlp: tuple, tmp_path: Path) -> None:
    copy = _copy_of(saved_mlp[0], tmp_path)
    metadata = json.loads((copy / "metadata.json").read_text())
    (copy / "metadata.json").write_text(json.dumps({**metadata, "format_version": 99}))
    with pytest.raises(CheckpointError, match="metadata.json.*Received: format_version=99"):
        load_model(copy)


def test_weights_that_do_not_fit_raise_checkpoint_error(saved_mlp: tuple, tmp_path: Path) -> None:
    copy = _copy_of(saved_mlp[0], tmp_path)
    weights = load_file(copy / "weights.safetensors")
    save_file({**weights, "0.weight": torch.zeros(2, 2)}, copy / "weights.safetensors")
    with pytest.raises(CheckpointError, match=r"weights.safetensors.*'0.weight' must be \(16, 6\)"):
        load_model(copy)
    del weights["3.bias"]
    save_file(weights, copy / "weights.safetensors")
    with pytest.raises(CheckpointError, match="Received: 3.bias=missing"):
        load_model(copy)


# ---- crafted model.pt2 files: each one is a way torch.export.load would run code ------
def _rewrite_archive(path: Path, change: Callable[[str, bytes], bytes], extra: dict[str, bytes] | None = None) -> None:
    with zipfile.ZipFile(path) as archive:
        entries = {info.filename: archive.read(info.filename) for info in archive.infolist()}
    root = next(iter(entries)).split("/", 1)[0]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in entries.items():
            archive.writestr(name, change(name.removeprefix(root + "/"), data))
        for name, data in (extra or {}).items():
            archive.writestr(f"{root}/{name}", data)


def _edit_program(edit: Callable[[dict], None]) -> Callable[[str, bytes], bytes]:
    def change(name: str, data: bytes) -> bytes:
        if name != "models/model.json":
            return data
        program = json.loads(data)
        edit(program)
        return json.dumps(program).encode()
    return change


class _RunsCode:
    def __init__(self, action: object, args: tuple) -> None:
        self.action, self.args = action, args

    def __reduce__(self) -> tuple:
        return self.action, self.args


def _pickled_marker(marker: Path) -> bytes:
    path = marker.with_suffix(".payload")
    torch.save(_RunsCode(open, (str(marker), "w")), path)
    return path.read_bytes()


def _craft(kind: str, program_path: Path, marker: Path) -> None:
    shell = f"touch {marker}"
    nodes = lambda program: program["graph_module"]["graph"]["nodes"]  # noqa: E731
    if kind == "pickled sample inputs":
        payload = _pickled_marker(marker)
        _rewrite_archive(program_path, lambda n, d: payload if n == "data/sample_inputs/model.pt" else d)
    elif kind == "pickled weight":
        payload = _pickled_marker(marker)

        def change(name: str, data: bytes) -> bytes:
            if name == "data/weights/model_weights_config.json":
                config = json.loads(data)
                config["config"]["0.weight"]["use_pickle"] = True
                return json.dumps(config).encode()
            return payload if name == "data/weights/weight_0" else data
        _rewrite_archive(program_path, change)
    elif kind == "compiled library":
        _rewrite_archive(program_path, lambda n, d: d, extra={"data/aotinductor/model/model.so": b"\x7fELF"})
    elif kind == "any callable as target":
        _rewrite_archive(program_path, _edit_program(lambda p: nodes(p)[0].update(target="torch.os.system")))
    elif kind == "file-writing aten op":
        save_op = "torch.ops.aten.save.default"
        _rewrite_archive(program_path, _edit_program(lambda p: nodes(p)[0].update(target=save_op)))
    elif kind == "code in a shape expression":
        evil = f"__import__('os').system('{shell}')"
        _rewrite_archive(program_path, lambda n, d: re.sub(rb"Symbol\('s\d+'[^)]*\)", evil.encode(), d)
                         if n == "models/model.json" else d)
    elif kind == "code in a parameter name":  # becomes getattr(self, "<name>") in generated source
        evil = f'0"),getattr(__import__("os"),"system")("{shell}"),getattr(self,"0'
        _rewrite_archive(program_path, lambda n, d: d.replace(b'"0.weight"', json.dumps(evil + ".weight").encode()))
    elif kind == "guards code":
        guard = f"__import__('os').system('{shell}')"
        _rewrite_archive(program_path, _edit_program(lambda p: p.update(guards_code=[guard])))
    elif kind == "module import in a pytree spec":
        context = json.dumps([{"__enum__": True, "fqn": "os:environ", "name": "HOME"}])  # imports os, reads env
        spec = json.dumps([1, {"type": "builtins.dict", "context": context, "children_spec": []}])
        _rewrite_archive(program_path, _edit_program(
            lambda p: p["graph_module"]["module_call_graph"][0]["signature"].update(in_spec=spec)))


@pytest.mark.parametrize("kind", [
    "pickled sample inputs", "pickled weight", "compiled library", "any callable as target", "file-writing aten op",
    "code in a shape expression", "code in a parameter name", "guards code", "module import in a pytree spec",
])
def test_crafted_program_is_refused_before_torch_reads_it(saved_mlp: tuple, tmp_path: Path, kind: str) -> None:
    copy = _copy_of(saved_mlp[0], tmp_path)
    marker = tmp_path / "marker"
    _craft(kind, copy / "model.pt2", marker)
    with pytest.raises(CheckpointError, match="Refused to load .*model.pt2"):
        load_model(copy)
    assert not marker.exists()


# ---- a fresh process: no model class, and a crash while saving ------------------------
_FRESH_PROCESS = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import stratagem.models as models

    saved, x_path, out_path, crash_path = sys.argv[1:5]
    # 1. Load and predict without the module that defines _TinyConvNet.
    loaded = models.load_model(saved)
    np.save(out_path, loaded.predict(np.load(x_path), batch_size=7))
    assert not any("test_export" in name or name.startswith("tests") for name in sys.modules), "test imported"

    # 2. Save twice to one folder, dying by SIGKILL before the second save is renamed into place.
    import torch
    from torch import nn
    import stratagem
    from stratagem.checkpoint import io as checkpoint_io

    torch.manual_seed(0)
    model = stratagem.Model(nn.Sequential(nn.Linear(6, 3)))
    model.save(crash_path, input_example=np.zeros((2, 6), np.float32))
    with torch.no_grad():
        model.module[0].weight.fill_(5.0)
    checkpoint_io._BEFORE_RENAME_HOOK.append(lambda tmp: os.kill(os.getpid(), signal.SIGKILL))
    model.save(crash_path, input_example=np.zeros((2, 6), np.float32))
    print("the second save was renamed into place")
""")


def test_fresh_process_loads_without_the_class_and_survives_a_crash_while_saving(saved_cnn: tuple,
                                                                                 tmp_path: Path) -> None:
    folder, x, model = saved_cnn
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "PYTHONPATH": str(_REPO_ROOT)}
    args = [str(folder), *(str(tmp_path / name) for name in ("x.npy", "out.npy", "crashed"))]
    proc = subprocess.run([sys.executable, "-c", _FRESH_PROCESS, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=90)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), model.predict(x, batch_size=7, verbose=0))
    # The first save survives whole; the second only ever lived in the temporary folder.
    survivor = load_model(tmp_path / "crashed")
    torch.manual_seed(0)
    reference = nn.Linear(6, 3)
    rows = np.ascontiguousarray(x[:, 0, 0, :6])
    with torch.no_grad():
        np.testing.assert_array_equal(survivor.predict(rows), reference(torch.from_numpy(rows)).numpy())
    assert any(p.name.startswith("crashed.tmp-") for p in tmp_path.iterdir())
