"""CSVLogger writes Keras' format: an epoch column, then the logs keys sorted, one row per epoch."""

from __future__ import annotations

import csv
from pathlib import Path

from stratagem.callbacks import CSVLogger
from tests.unit.callbacks._fakes import BATCH_SIZE, compiled_model, data


def _fit(logger: CSVLogger, epochs: int = 3, validation: bool = True) -> dict[str, list[float]]:
    x, y = data()
    return compiled_model().fit(x, y, batch_size=BATCH_SIZE, epochs=epochs, shuffle=False, verbose=0,
                                validation_data=data(16, seed=1) if validation else None, callbacks=[logger]).history


def test_rows_hold_epoch_then_sorted_keys_with_history_values(tmp_path: Path) -> None:
    path = tmp_path / "training.log"
    history = _fit(CSVLogger(str(path)))
    text = path.read_text()
    assert text.splitlines()[0] == "epoch,accuracy,loss,val_accuracy,val_loss"
    rows = list(csv.DictReader(path.open(newline="")))
    assert [row["epoch"] for row in rows] == ["0", "1", "2"]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [float(row[key]) for row in rows] == history[key]
    assert path.read_bytes().count(b"\r\n") == 4  # csv.excel line ends, as Keras writes them


def test_without_validation_val_columns_hold_na(tmp_path: Path) -> None:
    path = tmp_path / "training.log"
    _fit(CSVLogger(str(path)), epochs=2, validation=False)
    lines = path.read_text().splitlines()
    assert lines[0] == "epoch,accuracy,loss,val_accuracy,val_loss"
    assert [line.split(",")[3:] for line in lines[1:]] == [["NA", "NA"], ["NA", "NA"]]


def test_append_adds_rows_without_a_second_header(tmp_path: Path) -> None:
    path = tmp_path / "training.log"
    _fit(CSVLogger(str(path)), epochs=2)
    _fit(CSVLogger(str(path), append=True), epochs=2)
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and lines.count(lines[0]) == 1
    assert [line.split(",")[0] for line in lines[1:]] == ["0", "1", "0", "1"]


def test_without_append_a_second_fit_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "training.log"
    logger = CSVLogger(str(path))
    _fit(logger, epochs=2)
    _fit(logger, epochs=1)
    assert len(path.read_text().splitlines()) == 2


def test_separator_is_used_between_columns(tmp_path: Path) -> None:
    path = tmp_path / "training.log"
    _fit(CSVLogger(str(path), separator=";"), epochs=1)
    assert path.read_text().splitlines()[0] == "epoch;accuracy;loss;val_accuracy;val_loss"
