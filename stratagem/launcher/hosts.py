"""horovodrun's host flags for ``stratagem run``: ``-H host1:2,host2:2`` and ``--hostfile``.

They are mapped onto the launcher's own options (``-n``, ``--nnodes``,
``--node-rank``, ``--master-addr``): ``-np N`` processes fill the listed
hosts in order, up to each host's slots, and this host starts its share.
Unlike horovodrun, the launcher starts nothing over ssh: run the same
command on every listed host (each finds its own place in the list, or is
told with ``--node-rank``). The launcher starts the same number of processes
on every host, so the hosts in use must get equal shares.
"""

from __future__ import annotations

import argparse
import dataclasses
import socket

from stratagem.distribute._interfaces import is_loopback
from stratagem.errors import ConfigurationError

__all__ = ["HostSlots", "parse_hosts", "read_hostfile", "apply_host_list"]


@dataclasses.dataclass(frozen=True)
class HostSlots:
    """One host of a horovodrun host list and the processes it may run."""

    host: str
    slots: int


def parse_hosts(text: str) -> list[HostSlots]:
    """Parses ``-H``'s ``host1:2,host2:2`` (a host without ``:N`` has one slot)."""
    hosts = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, _, slots = item.rpartition(":") if ":" in item else (item, "", "1")
        hosts.append(HostSlots(host, _slots(slots, f"-H {text!r}")))
    return _checked(hosts, f"-H {text!r}")


def read_hostfile(path: str) -> list[HostSlots]:
    """Reads a horovodrun/MPI hostfile: one ``host slots=N`` (or ``host:N``, or ``host``) per line, ``#`` comments."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise ConfigurationError(f"Cannot read the hostfile: {err.strerror}. Pass an existing file to --hostfile. "
                                 f"Received: --hostfile={path!r}") from err
    hosts = []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"--hostfile {path!r} line {number}"
        if len(words) == 1:
            hosts.extend(parse_hosts(words[0]))
        elif len(words) == 2 and words[1].startswith("slots="):
            hosts.append(HostSlots(words[0], _slots(words[1][len("slots="):], where)))
        else:
            raise ConfigurationError(f"A hostfile line is `host slots=N`. Fix {where}. Received: {line!r}")
    return _checked(hosts, f"--hostfile {path!r}")


def _slots(text: str, where: str) -> int:
    try:
        slots = int(text)
    except ValueError:
        slots = 0
    if slots < 1:
        raise ConfigurationError(f"A host's slots must be a positive integer, as in host1:2. Fix {where}. "
                                 f"Received: slots={text!r}")
    return slots


def _checked(hosts: list[HostSlots], where: str) -> list[HostSlots]:
    names = [h.host for h in hosts]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if not hosts or repeated:
        raise ConfigurationError(f"A host list names each host once, with its slots (host1:2,host2:2). Fix {where}. "
                                 f"Received: hosts={names}, repeated={repeated}")
    return hosts


def apply_host_list(args: argparse.Namespace) -> argparse.Namespace:
    """Returns ``args`` with ``-H``/``--hostfile`` turned into ``-n``, ``--nnodes``, ``--node-rank`` and ``--master-addr``.

    Raises:
        ConfigurationError: For both flags at once, a clash with ``--nnodes`` or
            ``--ps``, more processes than slots, unequal shares, or when this
            host cannot be found in the list.
    """
    if args.hosts is not None and args.hostfile is not None:
        raise ConfigurationError("-H and --hostfile both list the hosts: pass one of them. "
                                 f"Received: -H {args.hosts!r}, --hostfile {args.hostfile!r}")
    clashing = {flag: value for flag, value in {"--nnodes": args.nnodes, "--ps": args.ps, "--workers": args.workers}.items()
                if value is not None}
    if clashing:
        raise ConfigurationError(f"-H/--hostfile decide the hosts, so {', '.join(clashing)} cannot be added. Drop "
                                 f"them. Received: {', '.join(f'{k}={v}' for k, v in clashing.items())}")
    hosts = parse_hosts(args.hosts) if args.hosts is not None else read_hostfile(args.hostfile)
    shares = _fill(hosts, args.nproc)
    used = [(host, share) for host, share in zip(hosts, shares) if share]
    if len({share for _, share in used}) > 1:
        raise ConfigurationError(
            "stratagem run starts the same number of processes on every host, but -np fills the hosts unevenly: "
            f"{', '.join(f'{h.host}: {n}' for h, n in used)}. Choose -np and slots so that every host used gets "
            f"the same share. Received: -np {args.nproc}, hosts={[f'{h.host}:{h.slots}' for h in hosts]}")
    node_rank = args.node_rank if args.node_rank is not None else _this_host([h.host for h, _ in used])
    if not 0 <= node_rank < len(used):
        raise ConfigurationError(f"--node-rank must index one of the {len(used)} hosts in use. "
                                 f"Received: --node-rank={node_rank}")
    first = used[0][0].host
    master_addr = args.master_addr
    if len(used) > 1 and is_loopback(master_addr):
        master_addr = first  # rank 0 runs on the first host, as under horovodrun
    return argparse.Namespace(**{**vars(args), "nproc": used[0][1], "nnodes": len(used) if len(used) > 1 else None,
                                 "node_rank": node_rank if len(used) > 1 else None, "master_addr": master_addr,
                                 "hosts": None, "hostfile": None})


def _fill(hosts: list[HostSlots], num_processes: int | None) -> list[int]:
    """horovodrun's placement: each host up to its slots, in list order; without -np, every slot."""
    total = sum(h.slots for h in hosts)
    wanted = total if num_processes is None else num_processes
    if not 1 <= wanted <= total:
        raise ConfigurationError(f"-np must be between 1 and the {total} slots the hosts offer. Raise the slots or "
                                 f"lower -np. Received: -np {num_processes}, slots={total}")
    shares = []
    for host in hosts:
        shares.append(min(host.slots, wanted))
        wanted -= shares[-1]
    return shares


def _this_host(hosts: list[str]) -> int:
    if len(hosts) == 1:
        return 0
    mine = [index for index, host in enumerate(hosts) if _is_this_machine(host)]
    if len(mine) != 1:
        found = "none of them" if not mine else f"several ({[hosts[i] for i in mine]})"
        raise ConfigurationError(
            f"Run this command on each listed host; this one ({socket.gethostname()}) matches {found}, so its "
            f"place in the job is unknown. Pass --node-rank with its index in the list. Received: hosts={hosts}")
    return mine[0]


def _is_this_machine(host: str) -> bool:
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        return False
    for address in addresses:
        # An address can be bound only on the machine that has it.
        family = socket.AF_INET6 if ":" in str(address) else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((str(address), 0))
                return True
            except OSError:
                continue
    return False
