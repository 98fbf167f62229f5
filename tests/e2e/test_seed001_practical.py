"""Seed 001's practical_mnist.py, the script `make demo` runs and the README opens with, runs whole and learns.

Thresholds and launch forms: tests/e2e/_seed_examples.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._seed_examples import TIMEOUT_S, Case, check_case, keras_home, params  # noqa: F401 (fixture)

pytestmark = pytest.mark.e2e

PRACTICAL = Case("practical_mnist.py", "run2", {}, r"\[rank 0\] Eval loss: .*Eval Accuracy: ([\d.]+)", 0.90,
                 "the seed's whole run (12 epochs of 32 steps, Adam with the decay), restored from the last checkpoint",
                 uses=("config.experimental.list_physical_devices", "config.experimental.set_memory_growth",
                       "distribute.MultiWorkerMirroredStrategy", "data.Dataset", "cast", "float32",
                       "keras.callbacks.TensorBoard", "keras.callbacks.ModelCheckpoint",
                       "keras.callbacks.LearningRateScheduler", "keras.callbacks.Callback",
                       "train.latest_checkpoint"))


@pytest.mark.timeout(TIMEOUT_S + 20)
@pytest.mark.parametrize("case", params([PRACTICAL]))
def test_practical_script_on_two_replicas_reaches_its_accuracy_and_saves(case: Case, keras_home: Path,
                                                                         tmp_path: Path) -> None:
    check_case(case, keras_home, tmp_path)
    # What the script writes, in its working folder: one weights checkpoint per epoch, the logs, the saved model.
    assert len(list((tmp_path / "training_checkpoints").glob("ckpt_*"))) >= 12
    assert any((tmp_path / "logs").rglob("events.out.tfevents.*"))
    assert (tmp_path / "saved_model").is_dir()


def test_readme_opening_diff_is_the_demo_script() -> None:
    # The README opens with seed 001's script as a diff: its "+" and " " lines must be the file `make demo` runs.
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    block = readme.split("```diff\n", 1)[1].split("\n```", 1)[0]
    stratagem_form = [line[1:] for line in block.splitlines() if not line.startswith("-")]
    assert stratagem_form == (root / "examples" / "seeds" / "practical_mnist.py").read_text().splitlines()
    assert "examples/seeds/practical_mnist.py" in (root / "Makefile").read_text().split("\ndemo:", 1)[1]
