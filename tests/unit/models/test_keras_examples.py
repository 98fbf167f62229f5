"""The Keras forms of the seed scripts (examples/) run end to end, in short form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import stratagem
# Imported at collection, outside any test: importing Keras sets TF_FORCE_GPU_ALLOW_GROWTH in os.environ.
from examples import keras_functional_cnn, keras_practical_mnist

pytestmark = pytest.mark.timeout(120)


def test_seed_001_practical_script_trains_checkpoints_and_saves(tmp_path: Path) -> None:
    result = keras_practical_mnist.main(["--epochs", "2", "--steps-per-epoch", "6", "--out-dir", str(tmp_path)])
    assert sorted(p.name for p in (tmp_path / "training_checkpoints").iterdir()) == [
        "ckpt_1.safetensors", "ckpt_2.safetensors"]
    assert result["accuracy"] > 0.3, result  # 12 steps of Adam on digits; chance is 0.1
    restored = stratagem.models.load_model(result["saved_model"])
    x = np.asarray(stratagem.datasets.digits.load_data()[1][0][:4], np.float32).reshape(-1, 28, 28, 1) / 255
    np.testing.assert_allclose(restored.predict(x), result["predict_first"], rtol=1e-5, atol=1e-6)


def test_seed_000_functional_model_trains_three_ways() -> None:
    result = keras_functional_cnn.main(["--epochs", "1", "--steps", "5"])
    assert set(result) == {"arrays", "dataset", "distributed"}
    assert all(accuracy > 0.3 for accuracy in result.values()), result  # chance is 0.1
