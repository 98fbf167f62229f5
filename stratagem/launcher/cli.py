"""``stratagem run``: argument parsing only; the work is in ``supervisor`` (and ``ps_job`` for ``--ps``)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable

from stratagem.errors import ConfigurationError, WorkerFailedError
from stratagem.launcher import elastic, hosts, ps_job, supervisor


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stratagem", description="Distributed training on PyTorch, the tf.distribute way.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="start and watch the worker processes of a training script",
        description="Start NUM processes of SCRIPT (one per replica), prefix their output with the rank, "
        "and stop the job at the first failure. With --ps P --workers W, start a parameter-server job instead: "
        "P servers, W workers and the chief; the job's exit status is the chief's.",
    )
    local = run.add_argument_group("this host")
    local.add_argument("-n", "--nproc", "-np", type=int, default=None, metavar="NUM",
                       help="processes (replicas) to start on this host; without it, one process that reads TF_CONFIG "
                       "(with --nnodes: one process, as torchrun); -np is horovodrun's spelling, with -H/--hostfile the job's total")
    cluster = run.add_argument_group("multi-host (torchrun-style flags; or set TF_CONFIG on each host and omit -n)")
    cluster.add_argument("--nnodes", type=_nnodes, default=None, metavar="N|MIN:MAX",
                         help="hosts in the job (default 1); MIN:MAX makes an elastic job whose hosts meet at "
                         "--master-addr:--master-port (torch's elastic rendezvous): hosts may leave (down to MIN) and join (up to MAX)")
    cluster.add_argument("--node-rank", type=int, default=None, help="index of this host (default 0)")
    cluster.add_argument("--master-addr", default="127.0.0.1",
                         help="address of rank 0's rendezvous (default 127.0.0.1); with --ps, the address every task binds")
    cluster.add_argument("--master-port", type=int, default=None, help="its port (default: a free port; required with --nnodes > 1)")
    cluster.add_argument("-H", "--hosts", default=None, metavar="HOST:SLOTS,...",
                         help="horovodrun-style host list; run the same command on each host (no ssh)")
    cluster.add_argument("--hostfile", default=None, help="horovodrun-style hostfile: `host slots=N` per line")
    ps = run.add_argument_group("parameter-server job on this host (instead of -n; the chief and workers run the script)")
    ps.add_argument("--ps", type=int, default=None, metavar="P", help="parameter servers to start (no script needed)")
    ps.add_argument("--workers", type=int, default=None, metavar="W", help="workers to start besides the chief")
    behaviour = run.add_argument_group("behaviour")
    behaviour.add_argument("--timeout", type=_seconds(positive=True), default=None, metavar="SECONDS",
                           help="rendezvous and collective timeout for the workers (default 300)")
    behaviour.add_argument("--max-restarts", type=int, default=0, metavar="K",
                           help="restart all workers up to K times when one fails (with BackupAndRestore the job resumes); "
                           "with --ps, restart each failed worker alone, up to K times")
    behaviour.add_argument("--grace-period", type=_seconds(positive=False), default=5.0, metavar="SECONDS",
                           help="time stopped workers get before SIGKILL (default 5); with --ps, workers get at least "
                           "30 s to end after the chief")
    target = run.add_argument_group("what to run")
    target.add_argument("-m", dest="module", action="store_true",
                        help="the target is a module name, run as python -m MODULE")
    target.add_argument("script_and_args", nargs=argparse.REMAINDER, help="the script and its arguments")
    return parser


def _seconds(*, positive: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds, > 0 or >= 0; argparse names the flag in its error."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"must be {'> 0' if positive else '>= 0'} seconds, got {text!r}")
        return value
    return parse


def _nnodes(text: str) -> int | tuple[int, int]:
    """N, or (MIN, MAX) for an elastic job; argparse names the flag in the error."""
    try:
        low, high = elastic.parse_nnodes(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return low if low == high else (low, high)


def config_from_args(args: argparse.Namespace) -> supervisor.LaunchConfig:
    if args.module and args.script_and_args:
        command = (sys.executable, "-m", *args.script_and_args)
    elif args.script_and_args:
        command = (sys.executable, *args.script_and_args)
    else:
        raise SystemExit("stratagem run: name a script to run, e.g. `stratagem run -n 2 train.py`")
    if args.hosts is not None or args.hostfile is not None:
        args = hosts.apply_host_list(args)  # horovodrun's -H/--hostfile, onto -n/--nnodes/--node-rank
    if args.ps is not None or args.workers is not None:
        return _ps_job_config(args, command)
    nnodes, max_nodes = args.nnodes if isinstance(args.nnodes, tuple) else (1 if args.nnodes is None else args.nnodes, None)
    nproc = args.nproc
    if nproc is None and args.nnodes is not None:
        nproc = 1  # torchrun's default: --nnodes N alone is one process per host
    if nproc is None:
        command = ps_job.command_for_this_task(command, os.environ)
    return supervisor.LaunchConfig(
        command=command, num_processes=nproc, nnodes=nnodes, max_nodes=max_nodes, node_rank=args.node_rank or 0,
        master_addr=args.master_addr, master_port=args.master_port, timeout_s=args.timeout,
        grace_period_s=args.grace_period, max_restarts=args.max_restarts,
    )


def _ps_job_config(args: argparse.Namespace, command: tuple[str, ...]) -> supervisor.LaunchConfig:
    if args.ps is None or args.workers is None:
        raise ConfigurationError(
            "--ps and --workers go together: a parameter-server job needs both counts. Pass both, e.g. "
            f"`stratagem run --ps 1 --workers 2 train.py`. Received: ps={args.ps}, workers={args.workers}")
    flags = {"-n": args.nproc, "--nnodes": args.nnodes, "--node-rank": args.node_rank, "--master-port": args.master_port}
    clashing = {flag: value for flag, value in flags.items() if value is not None}
    if clashing:
        raise ConfigurationError(
            f"--ps/--workers start a whole parameter-server job on this host, so {', '.join(clashing)} cannot be "
            "combined with them. Drop them; for a multi-host job, set TF_CONFIG on each host and run "
            "`stratagem run train.py` there without -n or --ps. "
            f"Received: {', '.join(f'{flag}={value}' for flag, value in clashing.items())}")
    return supervisor.LaunchConfig(
        command=command, num_workers=args.workers, num_ps=args.ps, master_addr=args.master_addr, timeout_s=args.timeout,
        grace_period_s=args.grace_period, max_restarts=args.max_restarts,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as err:
        print(f"stratagem run: {err}", file=sys.stderr)
        return 2
    try:
        if config.num_ps is not None:
            return ps_job.run(config)
        if config.max_nodes is not None:
            return elastic.run(config)
        code = supervisor.run(config)
    except WorkerFailedError as err:
        supervisor.say(str(err))
        return err.exit_code
    if code == 130:
        # Stopped by a signal, every worker gone: skip the interpreter's teardown of torch
        # (seconds on a loaded host), so the job is over when its processes are.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
