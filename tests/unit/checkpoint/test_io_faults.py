"""Checkpoint files under faults: leftovers of killed writes, a full disk, files and folders that are not checkpoints."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from stratagem.checkpoint import latest_checkpoint, load_state, save_state
from stratagem.errors import CheckpointError

_REPO_ROOT = Path(__file__).resolve().parents[3]


def test_next_successful_save_removes_temporaries_older_than_it(tmp_path: Path) -> None:
    stale = [tmp_path / ".ckpt-3.pt.k2x_9a7q.tmp", tmp_path / ".backup-7.pt.0abcdefg.tmp"]
    for path in stale:
        path.write_bytes(b"half a checkpoint")
    stale_folder = tmp_path / "saved.tmp-0123456789abcdef"  # an interrupted model.save
    stale_folder.mkdir()
    (stale_folder / "weights.safetensors").write_bytes(b"partial")
    for path in [*stale, stale_folder]:
        os.utime(path, (1_000, 1_000))
    in_progress = tmp_path / ".ckpt-5.pt.zzzzzzzz.tmp"  # changed after our write began: another write's
    in_progress.write_bytes(b"being written")
    future = 4_000_000_000
    os.utime(in_progress, (future, future))
    not_ours = [tmp_path / "notes.tmp", tmp_path / ".hidden"]
    for path in not_ours:
        path.write_text("keep")

    save_state(tmp_path / "ckpt-4.pt", {"w": torch.ones(3)})

    assert not [p.name for p in [*stale, stale_folder] if p.exists()], "leftovers of killed writes survived a save"
    assert in_progress.exists() and all(p.exists() for p in not_ours)
    assert torch.equal(load_state(tmp_path / "ckpt-4.pt")["w"], torch.ones(3))


_FILL_THE_DISK = textwrap.dedent("""
    import sys, torch
    from stratagem.checkpoint import save_state
    from stratagem.errors import CheckpointError
    for name in ("big.pt", "big.safetensors"):
        try:
            save_state(f"{sys.argv[1]}/{name}", {"w": torch.zeros(1_000_000)})  # 4 MB on a 1 MB file system
        except CheckpointError as err:
            print("CheckpointError:", err)
""")


def test_full_disk_raises_checkpoint_error_naming_path_and_space(tmp_path: Path) -> None:
    # A real full disk: a 1 MB tmpfs in a private mount namespace, where the system allows one.
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare to mount a small tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(_FILL_THE_DISK)
    command = f"mount -t tmpfs -o size=1m tmpfs '{mount}' && exec '{sys.executable}' '{script}' '{mount}'"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(_REPO_ROOT)})
    if proc.returncode != 0 and "CheckpointError" not in proc.stdout and "Traceback" not in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()[:200]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CheckpointError")]
    assert len(lines) == 2, proc.stdout + proc.stderr[-2000:]
    for name, line in zip(("big.pt", "big.safetensors"), lines):
        assert "no space left on device" in line and f"{mount}/{name}" in line, line


def test_random_bytes_are_called_damaged_not_unsafe(tmp_path: Path) -> None:
    path = tmp_path / "noise.pt"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(CheckpointError, match="noise.pt.*truncated or corrupt") as raised:
        load_state(path)
    assert "could run code" not in str(raised.value)


def test_folder_that_is_not_a_saved_model_is_called_a_folder(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="it is a folder, not a checkpoint file"):
        load_state(tmp_path)


def test_latest_checkpoint_finds_whole_model_folders(tmp_path: Path) -> None:
    save_state(tmp_path / "ckpt_1.safetensors", {"w": torch.zeros(2)})
    os.utime(tmp_path / "ckpt_1.safetensors", (1_000, 1_000))
    (tmp_path / "ckpt_2").mkdir()  # what ModelCheckpoint("ckpt_{epoch}") writes through model.save
    save_state(tmp_path / "ckpt_2" / "weights.safetensors", {"w": torch.ones(2)})
    (tmp_path / "logs").mkdir()  # a folder that is no checkpoint
    assert latest_checkpoint(tmp_path) == str(tmp_path / "ckpt_2")
    assert torch.equal(load_state(latest_checkpoint(tmp_path))["w"], torch.ones(2))
