"""Checkpoint files: round trips, damaged and malicious files, latest_checkpoint, crash safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import stratagem
from stratagem.checkpoint import latest_checkpoint, load_state, save_state
from stratagem.errors import CheckpointError

_REPO_ROOT = Path(__file__).resolve().parents[3]


class _RunsCode:
    """Unpickling this calls ``action(*args)``: the classic malicious checkpoint."""

    def __init__(self, action: object, args: tuple) -> None:
        self.action, self.args = action, args

    def __reduce__(self) -> tuple:
        return self.action, self.args


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))


def test_nested_state_round_trips_exactly(tmp_path: Path) -> None:
    state = {
        "model": {"weight": torch.randn(3, 4), "step": torch.tensor(7)},
        "epoch": 3, "learning_rate": 0.125, "name": "run-1",
        "history": [1, 2.5, "three", torch.arange(4)], "nested": {"deeper": {"flag": True, "none": None}},
    }
    save_state(tmp_path / "ckpt.pt", state)
    loaded = load_state(tmp_path / "ckpt.pt")
    assert loaded.keys() == state.keys()
    torch.testing.assert_close(loaded["model"]["weight"], state["model"]["weight"], rtol=0, atol=0)
    assert int(loaded["model"]["step"]) == 7
    assert (loaded["epoch"], loaded["learning_rate"], loaded["name"]) == (3, 0.125, "run-1")
    assert loaded["history"][:3] == [1, 2.5, "three"] and torch.equal(loaded["history"][3], torch.arange(4))
    assert loaded["nested"] == {"deeper": {"flag": True, "none": None}}


def test_safetensors_round_trips_non_contiguous_tensors(tmp_path: Path) -> None:
    state = {"weight": torch.randn(4, 6).t(), "steps": torch.arange(5, dtype=torch.int64), "half": torch.ones(2).half()}
    save_state(tmp_path / "w.safetensors", state)
    loaded = load_state(tmp_path / "w.safetensors")
    for key, value in state.items():
        assert loaded[key].dtype == value.dtype
        torch.testing.assert_close(loaded[key], value, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["ckpt.pt", "ckpt.safetensors"])
def test_truncated_file_raises_checkpoint_error_naming_it(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    save_state(path, {"weight": torch.randn(64, 64)})
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=name):
        load_state(path)


def test_missing_file_raises_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not found.*missing.pt"):
        load_state(tmp_path / "missing.pt")


@pytest.mark.parametrize("payload", ["os.system", "builtins.open"])
def test_file_that_runs_code_when_unpickled_is_refused(tmp_path: Path, payload: str) -> None:
    marker = tmp_path / "marker"
    if payload == "os.system":
        evil = _RunsCode(os.system, (f"touch '{marker}'",))
    else:
        evil = _RunsCode(open, (str(marker), "w"))  # creating the file is the proof of execution
    path = tmp_path / "evil.pt"
    torch.save({"weight": evil}, path)
    with pytest.raises(CheckpointError, match="evil.pt.*could run code"):
        load_state(path)
    with pytest.raises(CheckpointError, match="evil.pt"):
        stratagem.Model(_net()).load_weights(str(path))
    assert not marker.exists()


def test_latest_checkpoint_picks_newest_and_ignores_temporary_files(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "nowhere") is None
    assert latest_checkpoint(tmp_path) is None
    for number, mtime in ((1, 1_000), (2, 2_000), (10, 1_500)):
        save_state(tmp_path / f"ckpt-{number}.pt", {"n": number})
        os.utime(tmp_path / f"ckpt-{number}.pt", (mtime, mtime))
    # Leftovers of interrupted writes, newer than every checkpoint.
    for leftover in (".ckpt-3.pt.abc123.tmp", "ckpt-4.pt.tmp"):
        (tmp_path / leftover).write_bytes(b"partial")
        os.utime(tmp_path / leftover, (9_000, 9_000))
    assert latest_checkpoint(tmp_path) == str(tmp_path / "ckpt-2.pt")
    os.utime(tmp_path / "ckpt-10.pt", (2_000, 2_000))  # a tie: the larger number wins
    assert latest_checkpoint(tmp_path) == str(tmp_path / "ckpt-10.pt")


_KILLED_WHILE_SAVING = textwrap.dedent("""
    import os, signal, sys
    import torch
    from torch import nn
    import stratagem
    from stratagem.checkpoint import io as checkpoint_io

    path = sys.argv[1]
    torch.manual_seed(0)
    model = stratagem.Model(nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)))
    with torch.no_grad():
        for parameter in model.module.parameters():
            parameter.fill_(1.0)
    model.save_weights(path)
    with torch.no_grad():
        for parameter in model.module.parameters():
            parameter.fill_(2.0)
    # Die the hard way (no cleanup, no finally) after writing checkpoint 2, before its rename.
    checkpoint_io._BEFORE_RENAME_HOOK.append(lambda tmp: os.kill(os.getpid(), signal.SIGKILL))
    model.save_weights(path)
    print("checkpoint 2 was renamed into place")
""")


@pytest.mark.parametrize("name", ["ckpt.safetensors", "ckpt.pt"])
def test_crash_between_write_and_rename_keeps_previous_checkpoint(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    env = {**os.environ, "PYTHONPATH": str(_REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", _KILLED_WHILE_SAVING, str(path)], env=env, capture_output=True,
                          text=True, timeout=90)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert "renamed into place" not in proc.stdout
    # The final name holds checkpoint 1, whole; checkpoint 2 only ever lived in a temp file.
    state = load_state(path)
    assert all(torch.equal(value, torch.ones_like(value)) for value in state.values())
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != name]
    assert leftovers and all(p.startswith(".") and p.endswith(".tmp") for p in leftovers)
    assert latest_checkpoint(tmp_path) == str(path)
    # Resume: a fresh model loads the surviving checkpoint and trains on.
    model = stratagem.Model(_net())
    model.compile(optimizer="sgd", loss="mse")
    model.load_weights(str(latest_checkpoint(tmp_path)))
    rng = np.random.default_rng(0)
    history = model.fit(rng.normal(size=(16, 4)).astype(np.float32), rng.normal(size=(16, 3)).astype(np.float32),
                        batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert not all(torch.equal(v, torch.ones_like(v)) for v in model.module.state_dict().values())
    # The next successful save removes the killed write's temporary file.
    model.save_weights(str(path))
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_latest_checkpoint_passes_over_newer_files_that_are_not_checkpoints(tmp_path: Path) -> None:
    model = stratagem.Model(_net())
    model.save_weights(str(tmp_path / "ckpt_1"))  # the TF tutorial's ModelCheckpoint name: no suffix
    model.save_weights(str(tmp_path / "ckpt_2.safetensors"))
    os.utime(tmp_path / "ckpt_1", (1_000, 1_000))
    os.utime(tmp_path / "ckpt_2.safetensors", (2_000, 2_000))
    # Written later beside them: a CSV log, a TensorBoard event file, notes, a zip that torch did not write.
    (tmp_path / "log.csv").write_text("epoch,loss\n0,1.0\n")
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"\x00" * 32)
    (tmp_path / "notes.txt").write_text("run 3")
    with zipfile.ZipFile(tmp_path / "data.zip", "w") as archive:
        archive.writestr("readme.txt", "not a checkpoint")
    for name in ("log.csv", "events.out.tfevents.1.host", "notes.txt", "data.zip"):
        os.utime(tmp_path / name, (9_000, 9_000))
    assert latest_checkpoint(tmp_path) == str(tmp_path / "ckpt_2.safetensors")
    os.utime(tmp_path / "ckpt_1", (3_000, 3_000))
    assert latest_checkpoint(tmp_path) == str(tmp_path / "ckpt_1")
    model.load_weights(latest_checkpoint(tmp_path))  # what TF scripts do with the answer
