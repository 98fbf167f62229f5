"""tf.config answers for torch's devices; tf.io.gfile works on local files; accepted no-ops warn once."""

from __future__ import annotations

import warnings

import pytest
import torch

import stratagem.tf as tf


def test_physical_and_logical_devices_are_torchs():
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert tf.config.list_physical_devices("CPU") == [tf.config.PhysicalDevice("/physical_device:CPU:0", "CPU")]
    assert len(tf.config.list_physical_devices("GPU")) == gpus
    assert len(tf.config.experimental.list_physical_devices()) == 1 + gpus
    assert tf.config.list_logical_devices("CPU")[0].name == "/device:CPU:0"
    assert tf.config.list_physical_devices("TPU") == []
    with pytest.raises(ValueError, match="device_type"):
        tf.config.list_physical_devices("XPU")


def test_memory_growth_is_accepted_silently_since_torch_already_grows():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for gpu in tf.config.experimental.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.experimental.set_memory_growth(tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU"), True)
    assert tf.config.experimental.get_memory_growth(None) is True


def test_a_setting_without_meaning_warns_exactly_once(monkeypatch):
    from stratagem.data import options

    monkeypatch.setattr(options, "_WARNED", set())
    cpu = tf.config.list_physical_devices("CPU")[0]
    with pytest.warns(UserWarning, match="virtual") as record:
        for _ in range(3):
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    assert len(record) == 1


def test_threading_sets_torchs_intra_op_threads():
    before = torch.get_num_threads()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        assert tf.config.threading.get_intra_op_parallelism_threads() == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert tf.config.threading.get_inter_op_parallelism_threads() == torch.get_num_interop_threads()


def test_gfile_round_trip(tmp_path):
    gfile = tf.io.gfile
    folder = tmp_path / "a" / "b"
    gfile.makedirs(str(folder))
    gfile.makedirs(str(folder))  # exists already: fine, as in TF
    assert gfile.exists(str(folder)) and gfile.isdir(str(folder))
    with gfile.GFile(str(folder / "x.txt"), "w") as handle:
        handle.write("hello")
    with gfile.GFile(str(folder / "x.txt"), "rb") as handle:
        assert handle.read() == b"hello"
    assert tf.io.read_file(str(folder / "x.txt")) == b"hello" == tf.read_file(str(folder / "x.txt"))
    gfile.copy(str(folder / "x.txt"), str(folder / "y.txt"))
    with pytest.raises(tf.errors.AlreadyExistsError):
        gfile.copy(str(folder / "x.txt"), str(folder / "y.txt"))
    gfile.rename(str(folder / "y.txt"), str(folder / "z.txt"))
    assert sorted(gfile.listdir(str(folder))) == ["x.txt", "z.txt"]
    assert sorted(gfile.glob(str(folder / "*.txt"))) == [str(folder / "x.txt"), str(folder / "z.txt")]
    gfile.remove(str(folder / "z.txt"))
    with pytest.raises(tf.errors.NotFoundError):
        gfile.remove(str(folder / "z.txt"))
    with pytest.raises(FileNotFoundError):  # NotFoundError is a FileNotFoundError
        gfile.GFile(str(folder / "missing"), "r")
    gfile.rmtree(str(tmp_path / "a"))
    assert not gfile.exists(str(tmp_path / "a"))


def test_gfile_refuses_remote_schemes():
    with pytest.raises(ValueError, match="gs://.*local"):
        tf.io.gfile.exists("gs://bucket/file")
