"""Launcher flags and signals that need no training process: bad values are refused naming the flag."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from stratagem.errors import ConfigurationError, WorkerFailedError
from stratagem.launcher import cli, supervisor


@pytest.mark.parametrize(("flag", "value"), [("--timeout", "0"), ("--timeout", "-5"), ("--timeout", "nan"),
                                             ("--grace-period", "-1")])
def test_bad_seconds_flag_is_refused_naming_it(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli.build_parser().parse_args(["run", "-n", "2", f"{flag}={value}", "train.py"])
    assert raised.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_launch_config_refuses_bad_seconds() -> None:
    with pytest.raises(ValueError, match="Received: timeout_s=0"):
        supervisor.LaunchConfig(command=("x",), timeout_s=0)
    with pytest.raises(ValueError, match="Received: grace_period_s=-1"):
        supervisor.LaunchConfig(command=("x",), grace_period_s=-1)


def test_unresolvable_master_addr_is_a_configuration_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigurationError, match=r"--master-addr 'no-such-host\.invalid' does not resolve"):
        supervisor.LaunchConfig(command=("x",), num_processes=2, master_addr="no-such-host.invalid")
    assert cli.main(["run", "-n", "2", "--master-addr", "no-such-host.invalid", "train.py"]) == 2
    assert "does not resolve" in capsys.readouterr().err


def test_ctrl_c_during_restart_backoff_ends_the_job_without_traceback(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    def failing_group(config: supervisor.LaunchConfig, error_dir: str, attempt: int) -> int:
        raise WorkerFailedError("rank 0 failed", rank=0, exit_code=1, log_tail="")

    monkeypatch.setattr(supervisor, "_run_in", failing_group)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))  # inside the 1 s backoff
    timer.start()
    try:
        code = supervisor.run(supervisor.LaunchConfig(command=(sys.executable,), max_restarts=2))
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C during the restart backoff escaped as KeyboardInterrupt")
    finally:
        timer.join()
    assert code == 130
    assert "stopped during the restart backoff" in capsys.readouterr().err
