"""``stratagem run``: argument parsing only; the work is in ``supervisor``."""

from __future__ import annotations

import argparse
import sys

from stratagem.errors import WorkerFailedError
from stratagem.launcher import supervisor


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stratagem", description="Distributed training on PyTorch, the tf.distribute way.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="start and watch the worker processes of a training script",
        description="Start NUM processes of SCRIPT (one per replica), prefix their output with the rank, "
        "and stop the job at the first failure.",
    )
    local = run.add_argument_group("this host")
    local.add_argument("-n", "--nproc", type=int, default=None, metavar="NUM",
                       help="processes (replicas) to start on this host; without it, one process that reads TF_CONFIG")
    cluster = run.add_argument_group("multi-host (torchrun-style flags; or set TF_CONFIG on each host and omit -n)")
    cluster.add_argument("--nnodes", type=int, default=1, help="hosts in the job (default 1)")
    cluster.add_argument("--node-rank", type=int, default=0, help="index of this host (default 0)")
    cluster.add_argument("--master-addr", default="127.0.0.1", help="address of rank 0's rendezvous (default 127.0.0.1)")
    cluster.add_argument("--master-port", type=int, default=None, help="its port (default: a free port; required with --nnodes > 1)")
    behaviour = run.add_argument_group("behaviour")
    behaviour.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                           help="rendezvous and collective timeout for the workers (default 300)")
    behaviour.add_argument("--max-restarts", type=int, default=0, metavar="K",
                           help="restart all workers up to K times when one fails (with BackupAndRestore the job resumes)")
    behaviour.add_argument("--grace-period", type=float, default=5.0, metavar="SECONDS",
                           help="time stopped workers get before SIGKILL (default 5)")
    target = run.add_argument_group("what to run")
    target.add_argument("-m", dest="module", action="store_true",
                        help="the target is a module name, run as python -m MODULE")
    target.add_argument("script_and_args", nargs=argparse.REMAINDER, help="the script and its arguments")
    return parser


def config_from_args(args: argparse.Namespace) -> supervisor.LaunchConfig:
    if args.module and args.script_and_args:
        command = (sys.executable, "-m", *args.script_and_args)
    elif args.script_and_args:
        command = (sys.executable, *args.script_and_args)
    else:
        raise SystemExit("stratagem run: name a script to run, e.g. `stratagem run -n 2 train.py`")
    return supervisor.LaunchConfig(
        command=command, num_processes=args.nproc, nnodes=args.nnodes, node_rank=args.node_rank,
        master_addr=args.master_addr, master_port=args.master_port, timeout_s=args.timeout,
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
        return supervisor.run(config)
    except WorkerFailedError as err:
        print(f"stratagem: {err}", file=sys.stderr, flush=True)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
