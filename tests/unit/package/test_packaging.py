"""The package installs and imports as pyproject.toml says, and its tests run under plain pytest."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tests.unit.package._source import PACKAGE, ROOT

# APIs newer than 3.10 that the package relies on, with the version that added them.
_NEWER_APIS = {"add_note": (3, 11), "tomllib": (3, 11), "ExceptionGroup": (3, 11)}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_requires_python_covers_the_apis_the_package_uses() -> None:
    declared = tuple(int(p) for p in re.fullmatch(r">=(\d+)\.(\d+)", _project()["requires-python"]).groups())
    source = "\n".join(path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py"))
    needed = max([v for api, v in _NEWER_APIS.items() if re.search(rf"\b{api}\b", source)], default=(3, 8))
    assert declared >= needed, f"requires-python says {declared}, but the code uses APIs from {needed}"


def test_import_stratagem_loads_no_optional_dependency() -> None:
    probe = ("import sys, stratagem, stratagem.data, stratagem.callbacks; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'PIL', 'grpc', 'tensorboard', 'matplotlib', 'mlxtend', 'keras'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_plain_pytest_collects_the_multi_process_tests() -> None:
    # -I keeps the current folder off sys.path, as the `pytest` script does (`python -m` would add it).
    out = subprocess.run([sys.executable, "-I", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/dist/test_mirrored_equivalence.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "test_two_replicas_match_one_replica_weights" in out.stdout


def test_makefile_installs_the_dependencies_pyproject_declares() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    install = next(line for line in makefile.splitlines() if "install $(TORCH_PIN)" in line)
    assert "-e \".[" in install and "--no-deps" not in install, install
    for dependency in _project()["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", dependency).group(0)
        assert name == "torch" or name not in install, f"{name} is listed in the Makefile as well as pyproject.toml"
