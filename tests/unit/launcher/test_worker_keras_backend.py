"""`stratagem run` gives its workers KERAS_BACKEND=torch unless the user chose a backend (issue 19).

A script that runs `import keras` before stratagem would otherwise get Keras 3's default backend,
TensorFlow, which is not installed: "No module named 'tensorflow'".
"""

from __future__ import annotations

import pytest

from stratagem.launcher.environment import ps_task_env, worker_env


def _envs() -> list[dict[str, str]]:
    return [worker_env(rank=0, world_size=2, local_rank=0, local_world_size=2, master_addr="127.0.0.1",
                       master_port=29500, timeout_s=None),
            ps_task_env(tf_config="{}", restart_count=0, timeout_s=None)]


def test_unset_keras_backend_is_torch_for_workers_and_ps_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert [env.get("KERAS_BACKEND") for env in _envs()] == ["torch", "torch"]


def test_users_keras_backend_is_passed_on_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    # The launcher merges these over its own environment: leaving the key out keeps the user's value.
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert all("KERAS_BACKEND" not in env for env in _envs())
