"""What the seed-example tests share: the cases' shape, the Keras cache fixture, and running an example.

Every seed snippet's example (examples/seeds/) runs through ``import stratagem.tf as tf`` and learns.

Each example is a seed document's code with its import line changed (and, where TensorFlow downloads, a local data
source). Here each runs as the seed runs it, in short form (``SEED_EPOCHS`` / ``SEED_STEPS``), with 2 replicas where
it is distributed: ``stratagem run -n 2`` for an unchanged ``MirroredStrategy()`` / ``MultiWorkerMirroredStrategy()``
/ ``CentralStorageStrategy()``, two processes each with its own ``TF_CONFIG`` for the seed's manual cluster setup,
``stratagem run --ps 1 --workers 2`` for ``ParameterServerStrategy``. Each process is a fork of a warm server
that imported torch, Keras and stratagem.tf once (``stratagem.testing.warm_processes``), given the environment its
launch form would give it (``stratagem run``'s for its workers, ``TF_CONFIG`` for the manual cluster), the
example run as ``__main__``: a fresh interpreter costs about 4 s of CPU before the example's first line, three of
them per launched example; ``make demo``'s script too. ``stratagem run``'s real exec path (fresh interpreters, a
seed example among them) is the launcher tests': ``tests/e2e/test_launcher.py``, ``test_restart.py`` and
``tests/dist/test_seed_shaped.py``'s Mirrored snippet. ``tf.keras.datasets.*.load_data()`` reads
Keras's own cache, which the ``keras_home`` fixture fills from the bundled digits (4,000 train / 1,000 test): the
examples' Fashion-MNIST is the digits too.

Thresholds: only seed 004 states an accuracy (0.896 on Fashion-MNIST after 2,000 steps; about 95% on the OCT images
with ImageNet weights); the others print theirs without a number in the text. Each threshold is what the short run
reliably reaches on the digits (chance is 0.10; 0.25 for the 4-class image folder), stated beside its case with why.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from stratagem.datasets import digits, idx
from stratagem.launcher.ports import find_free_ports
from stratagem.testing.ps_cluster import LocalPSCluster
from stratagem.testing.warm_processes import ScriptProcess, launched_processes


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "seeds"
TIMEOUT_S = 100


@dataclass(frozen=True)
class Case:
    script: str
    # "python"; "run2" (stratagem run -n 2); "tf_config2" (2 processes, TF_CONFIG each); "argv2" (2 processes, task index in
    # argv); "ps" (stratagem run --ps 1 --workers 2)
    launch: str
    knobs: dict[str, str]
    accuracy: str  # regex whose group 1 is the accuracy the example prints (the last match counts)
    threshold: float
    why: str
    env: dict[str, str] = field(default_factory=dict)
    uses: tuple[str, ...] = ()  # stratagem.tf names the example needs beyond tf.keras models (checked by `gaps`)
    gap: str | None = None  # a known behaviour gap that fails the example: the case is marked xfail with it


def gaps(names: tuple[str, ...]) -> list[str]:
    """The dotted ``stratagem.tf`` names in ``names`` that do not resolve (a namespace not landed yet, a name missing)."""
    import stratagem.tf as tf

    missing = []
    for name in names:
        value: object = tf
        try:
            for part in name.split("."):
                value = getattr(value, part)
        except (AttributeError, ImportError):
            missing.append(f"tf.{name}")
    return missing


def params(cases: list[Case]) -> list[object]:
    """The cases as pytest params: xfail (not strict) while a name they use is missing or a known gap fails them."""
    out = []
    for case in cases:
        missing = gaps(case.uses)
        reasons = ([f"stratagem.tf lacks {', '.join(missing)}"] if missing else []) + ([case.gap] if case.gap else [])
        # A missing name fails at its line, so the case is not run; a behaviour gap runs (an XPASS shows its fix).
        marks = [pytest.mark.xfail(reason="; ".join(reasons), strict=False, run=not missing)] if reasons else []
        out.append(pytest.param(case, marks=marks, id=case.script.removesuffix(".py")))
    return out




@pytest.fixture(scope="module")
def keras_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Keras cache (``$KERAS_HOME/datasets``) holding the bundled digits as mnist.npz and fashion-mnist/*.gz."""
    return write_keras_home(tmp_path_factory.mktemp("keras_home"))


def write_keras_home(home: Path, train_images: int | None = None) -> Path:
    """Writes ``keras_home``'s files under ``home``: the first ``train_images`` training digits (all by default)."""
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    x_train, y_train = x_train[:train_images], y_train[:train_images]
    y_train, y_test = y_train.astype(np.uint8), y_test.astype(np.uint8)  # Keras's files hold uint8 labels
    fashion = home / "datasets" / "fashion-mnist"
    fashion.mkdir(parents=True)
    np.savez(home / "datasets" / "mnist.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    for name, array in (("train-labels-idx1-ubyte.gz", y_train), ("train-images-idx3-ubyte.gz", x_train),
                        ("t10k-labels-idx1-ubyte.gz", y_test), ("t10k-images-idx3-ubyte.gz", x_test)):
        idx.write_idx(fashion / name, array)
    return home


def _commands(case: Case) -> list[tuple[list[str], dict[str, str]]]:
    """The processes that run a ``python``, ``argv2`` or ``tf_config2`` example, each with its own extra environment."""
    script = str(EXAMPLES / case.script)
    if case.launch == "python":
        return [([sys.executable, script], {})]
    workers = [f"localhost:{port}" for port in find_free_ports(2)]
    if case.launch == "argv2":  # seed 002: the script writes TF_CONFIG itself from its task index
        return [([sys.executable, script, str(i)], {"SEED_WORKERS": ",".join(workers)}) for i in range(2)]
    assert case.launch == "tf_config2"  # seed 001: TF_CONFIG set for each process before it starts
    return [([sys.executable, script],
             {"TF_CONFIG": f'{{"cluster": {{"worker": ["{workers[0]}", "{workers[1]}"]}}, '
                           f'"task": {{"type": "worker", "index": {i}}}}}'}) for i in range(2)]


def _environment(case: Case, keras_home: Path) -> dict[str, str]:
    base = dict(os.environ, KERAS_HOME=str(keras_home), STRATAGEM_TIMEOUT_S="60", **case.knobs, **case.env)
    base.pop("TF_CONFIG", None)
    return base


def _run_warm(case: Case, cwd: Path, keras_home: Path) -> str:
    """Runs the example's processes as forks of the warm server, each with the environment its launch form gives.

    ``run2`` and ``ps`` get the environment ``stratagem run`` gives its workers (``launched_processes``,
    ``LocalPSCluster``), and their output the launcher's ``[rank r]`` / ``[chief]`` prefixes; a failed
    process stops the others, as the launcher does.
    """
    base, script = _environment(case, keras_home), str(EXAMPLES / case.script)
    with tempfile.TemporaryDirectory(prefix="seed-example-logs-") as log_dir:
        logs = Path(log_dir)
        if case.launch == "ps":
            with LocalPSCluster(script, num_workers=2, num_ps=1, log_dir=logs, env=base, cwd=cwd) as cluster:
                code = cluster.wait("chief", 0, TIMEOUT_S)
                assert code == 0, f"{case.script}: the chief exited with {code}:\n{cluster.logs()[-4000:]}"
            return _prefixed(logs / "chief0.log", "chief")
        if case.launch == "run2":
            return run_launched([script], 2, env=base, cwd=cwd, what=case.script)
        processes = [ScriptProcess(command[1:], env=dict(base, **extra), cwd=cwd, log_path=logs / f"rank{i}.log")
                     for i, (command, extra) in enumerate(_commands(case))]
        _wait_all(processes, TIMEOUT_S)
        outputs = [(logs / f"rank{i}.log").read_text(errors="replace") for i in range(len(processes))]
        for process, output in zip(processes, outputs):
            assert process.returncode == 0, f"{case.script} exited with {process.returncode}:\n{output[-4000:]}"
        return outputs[0]


def run_launched(command: list[str], num_processes: int, *, env: dict[str, str], cwd: Path, what: str,
                 timeout_s: float = TIMEOUT_S) -> str:
    """The workers of ``stratagem run -n NUM_PROCESSES COMMAND...`` as warm processes (``launched_processes``).

    Asserts each exits 0; returns their output as the launcher passes it on, each line prefixed ``[rank r] ``.
    """
    with tempfile.TemporaryDirectory(prefix="launched-logs-") as log_dir:
        logs = Path(log_dir)
        processes = launched_processes(command, num_processes, env=env, cwd=cwd, log_dir=logs)
        _wait_all(processes, timeout_s)
        outputs = [_prefixed(logs / f"rank{rank}.log", f"rank {rank}") for rank in range(num_processes)]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, f"{what} exited with {process.returncode}:\n{output[-4000:]}"
    return "".join(outputs)


def _wait_all(processes: list[ScriptProcess], timeout_s: float) -> None:
    """Waits until every process ended, one failed or ``timeout_s`` passed; then kills the ones left."""
    deadline = time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in processes):  # its peers would wait for it until their timeout
                break
            time.sleep(0.05)
    finally:
        for process in processes:
            process.kill()  # a no-op once it has ended
            process.wait(5)


def _prefixed(log: Path, label: str) -> str:
    """The log's lines as the launcher passes them on: ``[label] `` first, torch's own ``[rankN]: `` dropped."""
    torch_prefix = f"[{label.replace(' ', '')}]: "
    return "".join(f"[{label}] {line.removeprefix(torch_prefix)}\n"
                   for line in log.read_text(errors="replace").splitlines())


def check_case(case: Case, keras_home: Path, cwd: Path) -> float:
    """Runs the example in ``cwd`` and asserts it printed an accuracy at or above its threshold; returns it."""
    output = _run_warm(case, cwd, keras_home)
    found = re.findall(case.accuracy, output)
    assert found, f"{case.script} printed no accuracy matching {case.accuracy!r}:\n{output[-4000:]}"
    accuracy = float(found[-1])
    assert accuracy >= case.threshold, (f"{case.script}: accuracy {accuracy} < {case.threshold} ({case.why})\n"
                                        f"{output[-3000:]}")
    print(f"{case.script}: accuracy {accuracy} >= {case.threshold}")  # shown by pytest -rP
    return accuracy
