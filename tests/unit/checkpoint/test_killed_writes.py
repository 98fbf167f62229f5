"""Writes killed midway leave temporaries; the next save (or the job's start) removes them, and none is a checkpoint.

The kill tests SIGKILL a real writer while its temporary file is on disk: ours (``.<name>.<8>.tmp``)
and safetensors' own (``.tmp<6>``, which it renames over ours when done).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import stratagem
from stratagem.callbacks import BackupAndRestore
from stratagem.checkpoint import ShardedCheckpoint, latest_checkpoint, save_state
from stratagem.data import Dataset
from tests.unit.checkpoint._small import small_data, small_model

_REPO_ROOT = Path(__file__).resolve().parents[3]
_OLD = 1_000  # a modification time long before any save here

_WRITER = textwrap.dedent("""
    import sys, torch
    from stratagem.checkpoint import save_state
    state = {"w": torch.zeros(25_000_000)}  # 100 MB: the write takes long enough to be caught
    print("ready", flush=True)
    save_state(sys.argv[1], state)
""")


def _kill_while_writing(target: Path, tmp_path: Path) -> list[str]:
    """Starts a writer of ``target``, SIGKILLs it once a temporary file appears; the names left."""
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    folder = target.parent
    before = set(os.listdir(folder))
    for _ in range(5):  # the kill must land during the write; a write that finished first is retried
        proc = subprocess.Popen([sys.executable, str(script), str(target)], stdout=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(_REPO_ROOT)})
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if any(_caught(target, name) for name in set(os.listdir(folder)) - before):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.001)
        proc.wait(timeout=30)
        if proc.returncode == -signal.SIGKILL:
            return sorted(set(os.listdir(folder)) - before)
        target.unlink(missing_ok=True)
    pytest.fail("the writer always finished before the kill")


def _caught(target: Path, name: str) -> bool:
    """Whether ``name`` is the temporary to kill the writer of ``target`` at: safetensors' own, or ours."""
    if target.name.endswith(".safetensors"):
        return re.fullmatch(r"\.tmp[A-Za-z0-9]{6}", name) is not None  # ours comes first and is empty
    return name.endswith(".tmp")


@pytest.mark.parametrize("name", ["ckpt-1.safetensors", "ckpt-1.pt"])
def test_next_save_removes_what_a_killed_write_left(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    left = _kill_while_writing(folder / name, tmp_path)
    assert left and not (folder / name).exists(), left  # the kill left temporaries and no checkpoint
    assert latest_checkpoint(folder) is None  # a temporary is never taken as a checkpoint
    suffix = name.split(".")[-1]
    save_state(folder / f"ckpt-2.{suffix}", {"w": torch.ones(2)})
    assert sorted(os.listdir(folder)) == [f"ckpt-2.{suffix}"]
    assert latest_checkpoint(folder) == str(folder / f"ckpt-2.{suffix}")


def test_safetensors_own_temporary_is_removed_and_look_alikes_stay(tmp_path: Path) -> None:
    stale = tmp_path / ".tmpAb12Cd"  # safetensors' temporary (tempfile's .tmp + 6 letters or digits)
    stale.write_bytes(b"\0" * 64)
    partial = tmp_path / ".ckpt-3.partial"  # a sharded save killed before its rename
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"half")
    for path in (stale, partial):
        os.utime(path, (_OLD, _OLD))
    keep = [tmp_path / ".tmpAb12Cd7", tmp_path / "tmpAb12Cd", tmp_path / ".notes.old", tmp_path / ".x.partial"]
    for path in keep:  # not temporaries of ours: another length, no dot, files named like our folders
        path.write_text("keep")
        os.utime(path, (_OLD, _OLD))
    save_state(tmp_path / "ckpt-4.safetensors", {"w": torch.ones(2)})
    assert not stale.exists() and not partial.exists()
    assert all(path.exists() for path in keep)


def test_sharded_save_removes_partial_folders_of_killed_saves(tmp_path: Path) -> None:
    partial = tmp_path / ".step-1.partial"  # what a kill during ShardedCheckpoint.save("step-1") leaves
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"half")
    os.utime(partial, (_OLD, _OLD))
    ShardedCheckpoint(small_model()).save(tmp_path / "step-2")
    assert sorted(os.listdir(tmp_path)) == ["step-2"]


def test_backup_and_restore_removes_temporaries_at_start(tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    backup.mkdir()
    left = [backup / ".backup-3.pt.k2x_9a7q.tmp", backup / ".tmpQw3Er5"]
    for path in left:
        path.write_bytes(b"half a backup")
    (backup / ".backup-3.shards.partial").mkdir()
    seen: list[list[str]] = []

    class Look(stratagem.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: dict[str, float] | None = None) -> None:
            if not seen:  # BackupAndRestore's on_train_begin runs last of all: look at the first batch
                seen.append(sorted(os.listdir(backup)))

    callbacks = [BackupAndRestore(backup, delete_checkpoint=False), Look()]
    small_model().fit(*small_data(), epochs=1, verbose=0, callbacks=callbacks)
    assert seen == [[]]  # gone before the first batch, and no backup was taken from them
    assert sorted(os.listdir(backup)) == ["backup-1.pt"]


def test_cache_commit_removes_temporaries_of_killed_writers_on_this_host(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    dead = [tmp_path / f"data.0.npz.tmp-{host}-{gone.pid}-{'a' * 32}", tmp_path / f"data.index.json.tmp-{host}-{gone.pid}-{'b' * 32}"]
    alive = tmp_path / f"data.0.npz.tmp-{host}-{os.getpid()}-{'c' * 32}"  # a writer still at work
    elsewhere = tmp_path / f"data.0.npz.tmp-another-host-{gone.pid}-{'d' * 32}"  # its process is not ours to check
    for path in [*dead, alive, elsewhere]:
        path.write_bytes(b"half a chunk")
    assert [int(x) for x in Dataset.range(4).cache(str(tmp_path / "data"))] == [0, 1, 2, 3]
    assert not any(path.exists() for path in dead) and alive.exists() and elsewhere.exists()
    assert {"data.0.npz", "data.index.json"} <= set(os.listdir(tmp_path))


_FILL_WITH_A_CACHE = textwrap.dedent("""
    import os, sys
    import numpy as np
    from stratagem.data import Dataset
    from stratagem.errors import CheckpointError
    ds = Dataset.from_tensor_slices(np.zeros((2000, 256), np.float32)).cache(sys.argv[1] + "/data")
    iterator = iter(ds)  # alive while the folder is listed: nothing relies on its clean-up at exit
    try:
        for _ in iterator:
            pass
    except CheckpointError as err:
        print("CheckpointError:", err)
    print("left:", sorted(os.listdir(sys.argv[1])))
""")


def test_cache_on_a_full_disk_names_the_path_and_leaves_no_temporary(tmp_path: Path) -> None:
    # A real full disk: 2 MB of chunks onto a 1 MB tmpfs in a private mount namespace, where one is allowed.
    if subprocess.run(["sh", "-c", "command -v unshare"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare to mount a small tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(_FILL_WITH_A_CACHE)
    command = (f"mount -t tmpfs -o size=1m tmpfs '{mount}' && echo mounted && "
               f"exec '{sys.executable}' '{script}' '{mount}'")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(_REPO_ROOT)})
    if "mounted" not in proc.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()[:200]}")
    assert f"CheckpointError: Cannot write cache file '{mount}/data." in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "no space left on device" in proc.stdout
    assert "left: []" in proc.stdout, proc.stdout

