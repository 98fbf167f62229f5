"""Which local network interface gloo listens on, and the address it advertises to peers.

gloo advertises the address this host's name resolves to; where that is loopback (many ``/etc/hosts``, Debian's
``127.0.1.1``) a multi-host job tells its peers to connect to 127.0.0.1 and dies in ``connectFullMesh``. TF trains
on such hosts, so we pick what ``GLOO_SOCKET_IFNAME`` would name: the interface routing to the chief (a loopback job
stays on loopback). The route is read by ``connect`` on a UDP socket, which sends no packet.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

GLOO_IFNAME_ENV = "GLOO_SOCKET_IFNAME"
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def is_loopback(host: str) -> bool:
    """Whether ``host`` reaches this machine's loopback only: every address it resolves to is loopback.

    ``host`` is a name or an address; an IPv6 address may be bracketed (``[::1]``, as in ``[::1]:2222``) and carry a
    zone (``fe80::1%eth0``). A name that does not resolve, and the wildcard ``0.0.0.0``/``::`` (every interface),
    are not loopback.
    """
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        infos = socket.getaddrinfo(name.split("%")[0], None) if name else []
    except OSError:
        return False
    return bool(infos) and all(_is_loopback_address(str(info[4][0])) for info in infos)


def resolution_error(host: str) -> str | None:
    """The resolver's complaint if ``host`` has no address (a misspelt or unknown name), else None."""
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as err:
        return str(err.strerror)
    except UnicodeError as err:  # a name no resolver takes (an empty label, too long)
        return str(err)
    except OSError:
        return None
    return None


def _is_loopback_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    # NOTE: Python 3.11 calls ::ffff:127.0.0.1 (IPv4 loopback seen from an IPv6 socket) not loopback.
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def choose_gloo_interface(master_addr: str) -> tuple[str, str | None]:
    """Sets ``GLOO_SOCKET_IFNAME`` unless the user did; returns (interface, its address or None).

    Loopback for a loopback job; otherwise the interface of the route to ``master_addr`` (the chief's rendezvous
    host). An interface named by the user is kept as is.
    """
    name = os.environ.get(GLOO_IFNAME_ENV)
    if not name:
        if is_loopback(master_addr):
            name = _loopback_name()
        else:
            name = route_interface(master_addr) or ""
        if name:
            # NOTE: gloo reads the variable when each process group is created, so it stays set for the groups made
            # later (new_group, restarts).
            os.environ[GLOO_IFNAME_ENV] = name
    return name, interface_address(name) if name else None


def route_interface(host: str) -> str | None:
    """The name of the interface this host would use to reach ``host``, or None if unknown."""
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(sockaddr)  # UDP: picks the route and source address, sends nothing
            local = str(probe.getsockname()[0])
    except OSError:
        return None
    return next((name for _, name in socket.if_nameindex() if interface_address(name) == local), None) \
        or _ipv6_interface(local)


def interface_address(name: str) -> str | None:
    """The IPv4 address of interface ``name`` (else its first IPv6 address), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            return socket.inet_ntoa(packed[20:24])
        except OSError:
            pass
    return next((address for address, owner in _ipv6_addresses() if owner == name), None)


def _ipv6_interface(address: str) -> str | None:
    wanted = address.split("%")[0]
    return next((owner for candidate, owner in _ipv6_addresses() if candidate == wanted), None)


def _ipv6_addresses() -> list[tuple[str, str]]:
    # Linux lists each IPv6 address as: hex address, index, prefix, scope, flags, name.
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as table:
            rows = [line.split() for line in table]
    except OSError:
        return []
    return [(str(ipaddress.IPv6Address(bytes.fromhex(row[0]))), row[5]) for row in rows if len(row) == 6]


def _loopback_name() -> str:
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return names[0] if names else "lo"
