"""Callback constructors refuse what cannot work, at once: an empty path (Keras refuses BackupAndRestore('')), a
schedule that is not a function (Keras fails at the first epoch with "'int' object is not callable")."""

from __future__ import annotations

import pytest

from stratagem.callbacks import BackupAndRestore, CSVLogger, LearningRateScheduler, ModelCheckpoint


@pytest.mark.parametrize(("make", "name"), [
    (BackupAndRestore, "backup_dir"), (ModelCheckpoint, "filepath"), (CSVLogger, "filename"),
])
@pytest.mark.parametrize("path", ["", "  "])
def test_empty_paths_are_refused(make: type, name: str, path: str) -> None:
    with pytest.raises(ValueError, match=rf"needs a {name} to write to, but it is empty.*Received: {name}="):
        make(path)


def test_a_path_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match="backup_dir must be a path.*of type NoneType"):
        BackupAndRestore(None)  # type: ignore[arg-type]


def test_schedule_must_be_callable() -> None:
    with pytest.raises(TypeError, match="LearningRateScheduler takes a function.*of type int"):
        LearningRateScheduler(3)  # type: ignore[arg-type]
