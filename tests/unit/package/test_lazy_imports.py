"""``import stratagem`` is cheap: public names import on first use, and the launcher never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

import stratagem
import stratagem.distribute

HEAVY = ("torch", "keras", "numpy", "grpc")


def _imported_after(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [name for name in proc.stdout.strip().split(",") if name]


def test_launcher_cli_imports_no_torch_keras_numpy_or_grpc() -> None:
    # `stratagem run` only parses flags and starts processes: torch's import was 1.8 s of CPU per launch.
    assert _imported_after("import stratagem.launcher.cli") == []


def test_import_stratagem_alone_imports_no_torch_but_sets_the_keras_backend() -> None:
    assert _imported_after("import stratagem, os\nassert os.environ['KERAS_BACKEND'] == 'torch'") == []


def test_first_use_of_a_public_name_imports_it() -> None:
    assert "torch" in _imported_after("import stratagem\nstratagem.distribute.MirroredStrategy")


@pytest.mark.parametrize("package", [stratagem, stratagem.distribute], ids=lambda p: p.__name__)
def test_every_public_name_resolves_and_is_listed_by_dir(package: object) -> None:
    names = package.__all__  # type: ignore[attr-defined]
    missing = [name for name in names if getattr(package, name, None) is None]
    assert not missing, f"{package.__name__} lists names that do not resolve: {missing}"  # type: ignore[attr-defined]
    assert set(names) <= set(dir(package))


def test_from_import_and_submodule_attributes_work_lazily() -> None:
    from stratagem import Model, one_hot
    from stratagem.distribute import MirroredStrategy, ParameterServerStrategy

    assert Model.__module__.startswith("stratagem.models")
    assert callable(one_hot) and MirroredStrategy.__name__ == "MirroredStrategy"
    assert ParameterServerStrategy.__module__ == "stratagem.distribute.parameter_server"
    assert stratagem.distribute.collectives.__name__ == "stratagem.distribute.collectives"


@pytest.mark.parametrize("package", [stratagem, stratagem.distribute], ids=lambda p: p.__name__)
def test_unknown_name_raises_attribute_error(package: object) -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        package.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
