"""A local parameter-server job for tests: chief, workers and servers as real processes on loopback.

Each process gets the environment ``stratagem run --ps`` gives its tasks
(its own ``TF_CONFIG``, ``launcher.environment.ps_task_env``); servers run
``python -m stratagem.distribute.ps.serve`` (no script). Tests can kill and
restart single workers, read the servers' counters, and wait for the chief.
Every task is a warm process (``warm_processes.ScriptProcess``, a fork of a
server that imported torch and stratagem once); ``stratagem run``'s own
tests start real interpreters.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from stratagem._launched import ERROR_FILE_ENV
from stratagem.distribute import job_secret
from stratagem.launcher.environment import ps_cluster_configs, ps_task_env, threads_per_process
from stratagem.launcher.supervisor import stop_processes
from stratagem.testing.warm_processes import ScriptProcess

ROOT = Path(__file__).resolve().parents[2]


class LocalPSCluster:
    """Starts ``script`` as chief and ``num_workers`` workers, plus ``num_ps`` servers.

    Args:
        script: Path of the training script (run by the chief and the workers).
        num_workers, num_ps: Task counts.
        env: Extra environment for every process. Without ``STRATAGEM_JOB_SECRET`` in it the
            job gets a fresh secret, as under ``stratagem run`` (``""``: no secret).
        log_dir: Where each process's combined output goes (``chief.log``, ``worker0.log``...).
        args: The script's arguments.
        cwd: The tasks' working directory (the repository root by default).
    """

    def __init__(self, script: str | Path, *, num_workers: int, num_ps: int, log_dir: Path,
                 env: dict[str, str] | None = None, args: tuple[str, ...] = (), cwd: str | Path = ROOT) -> None:
        self.script, self.args, self.log_dir, self.cwd = str(script), args, log_dir, cwd
        self.configs = ps_cluster_configs(num_workers, num_ps)
        env = env or {}
        secret = {} if job_secret.SECRET_ENV in env or job_secret.SECRET_FILE_ENV in env else {
            job_secret.SECRET_ENV: job_secret.generate()}
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                    "PYTHONUNBUFFERED": "1", **secret, **env}
        self.env.setdefault("OMP_NUM_THREADS", str(threads_per_process(1 + num_workers + num_ps)))  # as ps_job's
        self.processes: dict[tuple[str, int], ScriptProcess] = {}
        self.restarts: dict[tuple[str, int], int] = {}
        for index in range(num_ps):
            self.start("ps", index)
        for index in range(num_workers):
            self.start("worker", index)
        self.start("chief", 0)

    def start(self, kind: str, index: int) -> ScriptProcess:
        key = (kind, index)
        attempt = self.restarts.get(key, -1) + 1
        self.restarts[key] = attempt
        command = ["-m", "stratagem.distribute.ps.serve"] if kind == "ps" else [self.script, *self.args]
        name = f"{kind}{index}{'' if attempt == 0 else f'.{attempt}'}"
        env = self.env | ps_task_env(tf_config=self.configs[key], restart_count=attempt, timeout_s=None) | {
            ERROR_FILE_ENV: str(self.log_dir / f"{name}.error.json")}  # where its uncaught exception is recorded
        process = ScriptProcess(command, env=env, cwd=self.cwd, log_path=self.log_dir / f"{name}.log")
        self.processes[key] = process
        return process

    def address(self, kind: str, index: int) -> str:
        return str(json.loads(self.configs[(kind, index)])["cluster"][kind][index])

    def wait(self, kind: str, index: int, timeout_s: float) -> int:
        """Exit status of a task, after at most ``timeout_s`` (then ``TimeoutError``)."""
        try:
            return self.processes[(kind, index)].wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{kind} {index} still running after {timeout_s:g}s.\n{self.logs()}") from None

    def logs(self) -> str:
        return "\n".join(f"--- {path.name} ---\n{path.read_text()[-3000:]}" for path in sorted(self.log_dir.glob("*.log")))

    def stop(self) -> None:
        stop_processes(list(self.processes.values()), grace_period_s=10.0)  # type: ignore[arg-type]  # Popen-like

    def __enter__(self) -> LocalPSCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
