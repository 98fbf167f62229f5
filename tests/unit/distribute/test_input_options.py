"""``options=`` of experimental_distribute_dataset / distribute_datasets_from_function is honoured or refused."""

from __future__ import annotations

import pytest

import stratagem
from stratagem.data import Dataset, TextLineDataset
from stratagem.distribute import InputOptions, OneDeviceStrategy


def _dataset() -> Dataset:
    return Dataset.range(8).batch(4)


def test_default_and_explicit_options_distribute_the_same_batches() -> None:
    strategy = OneDeviceStrategy()
    plain = [b.tolist() for b in strategy.experimental_distribute_dataset(_dataset())]
    explicit = [b.tolist() for b in strategy.experimental_distribute_dataset(
        _dataset(), options=InputOptions(experimental_replication_mode="PER_REPLICA"))]
    assert plain == explicit == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_place_dataset_on_device_is_refused_with_the_fix() -> None:
    strategy = OneDeviceStrategy()
    with pytest.raises(ValueError, match="experimental_place_dataset_on_device=True is not supported.*Leave it False"):
        strategy.experimental_distribute_dataset(_dataset(), options=InputOptions(experimental_place_dataset_on_device=True))
    with pytest.raises(ValueError, match="Received: experimental_place_dataset_on_device=True"):
        strategy.distribute_datasets_from_function(lambda ctx: _dataset(),
                                                   options=InputOptions(experimental_place_dataset_on_device=True))


def test_unknown_replication_mode_and_wrong_type_raise() -> None:
    strategy = OneDeviceStrategy()
    with pytest.raises(ValueError, match="PER_WORKER or PER_REPLICA"):
        strategy.experimental_distribute_dataset(_dataset(), options=InputOptions(experimental_replication_mode="ANY"))
    with pytest.raises(TypeError, match="InputOptions"):
        strategy.experimental_distribute_dataset(_dataset(), options={"experimental_fetch_to_device": True})


def test_ignored_buffer_size_warns_instead_of_silence() -> None:
    with pytest.warns(UserWarning, match="experimental_per_replica_buffer_size is ignored"):
        dataset = OneDeviceStrategy().experimental_distribute_dataset(
            _dataset(), options=InputOptions(experimental_per_replica_buffer_size=4))
    assert len(list(dataset)) == len(list(_dataset()))  # still every batch, only the option ignored


def test_text_line_dataset_constructor_returns_a_text_line_dataset(tmp_path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("x\ny\n")
    ds = TextLineDataset(str(path))
    assert isinstance(ds, TextLineDataset) and isinstance(ds, stratagem.data.Dataset)
    assert [line for line in ds] == [b"x", b"y"]
