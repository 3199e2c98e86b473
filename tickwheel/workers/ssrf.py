"""The SSRF guard: which network destinations an executor may reach.

A job owner controls the URL an ``http`` executor calls, so without a guard any team could
make the worker fetch cloud credentials (169.254.169.254), poke the broker on loopback or
scan the private network. The rule is simple and strict:

* every address a host name resolves to is checked; if **any** of them is refused, the
  destination is refused (a DNS answer mixing one internal address among public ones is the
  classic rebinding trick, and "connect to whichever is fine" is fragile);
* the connection then goes to exactly the addresses that were checked (the executor pins
  them in its resolver), so a second, different DNS answer cannot slip in between;
* IPv6 forms that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64
  ``64:ff9b::/96``, 6to4 ``2002::/16``, IPv4-compatible ``::a.b.c.d``) are judged by that
  IPv4 address;
* the operator may allow-list destinations (``WorkerConfig.ssrf_allow``): a host name
  (optionally ``:port``), an address (optionally ``:port``, IPv6 in brackets) or a CIDR.
  An allow-listed *name* trusts whatever that name resolves to.

``classify`` is pure and is what the unit tests pin form by form.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class DestinationRefused(Exception):  # noqa: N818 - reads as the outcome it reports
    """The SSRF guard refused a destination; the message says which address and why."""


def _nets(reason: str, *cidrs: str) -> list[tuple[IPNetwork, str]]:
    return [(ipaddress.ip_network(cidr), reason) for cidr in cidrs]


# Most specific first: the metadata addresses sit inside link-local / ULA ranges.
_V4_RULES: list[tuple[IPNetwork, str]] = [
    *_nets("cloud metadata", "169.254.169.254/32", "169.254.170.2/32", "100.100.100.200/32"),
    *_nets("unspecified", "0.0.0.0/8"),
    *_nets("loopback", "127.0.0.0/8"),
    *_nets("private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    *_nets("shared address space", "100.64.0.0/10"),
    *_nets("link-local", "169.254.0.0/16"),
    *_nets("multicast", "224.0.0.0/4"),
    *_nets(
        "reserved",
        "240.0.0.0/4",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
    ),
]
_V6_RULES: list[tuple[IPNetwork, str]] = [
    *_nets("cloud metadata", "fd00:ec2::254/128"),
    *_nets("unspecified", "::/128"),
    *_nets("loopback", "::1/128"),
    *_nets("private", "fc00::/7", "fec0::/10"),
    *_nets("link-local", "fe80::/10"),
    *_nets("multicast", "ff00::/8"),
    *_nets("reserved", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "::/96"),
]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPAT = ipaddress.ip_network("::/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 address stands for, and the name of the form, if any."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    if ip in _V4_COMPAT and int(ip) > 1:
        return "IPv4-compatible", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def classify(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be reached (``None`` when it is a public unicast address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_v4(ip)
        if embedded is not None:
            form, v4 = embedded
            inner = classify(v4)
            return None if inner is None else f"{inner} ({form} form of {v4})"
        rules = _V6_RULES
    else:
        rules = _V4_RULES
    for net, reason in rules:
        if ip in net:
            return reason
    # Anything else the IANA special-purpose registries mark as not globally reachable.
    return None if ip.is_global else "not globally routable"


def parse_ip(text: str) -> IPAddress | None:
    """``text`` as an address (brackets and an IPv6 zone id stripped), or None for a name."""
    bare = text.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """One operator allow-list entry: a host name or a network, with an optional port."""

    host: str | None
    network: IPNetwork | None
    port: int | None

    def allows(self, host: str, ip: IPAddress, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host is not None:
            return self.host == host.lower().rstrip(".")
        assert self.network is not None
        return ip.version == self.network.version and ip in self.network


def parse_allow_entry(text: str) -> AllowEntry:
    """Parse ``host``, ``host:port``, ``1.2.3.4[:port]``, ``[::1][:port]`` or a CIDR."""
    entry = text.strip()
    if "/" in entry:
        return AllowEntry(None, ipaddress.ip_network(entry, strict=False), None)
    host, port = _split_port(entry)
    ip = parse_ip(host)
    if ip is not None:
        return AllowEntry(None, ipaddress.ip_network(ip), port)
    if not host:
        raise ValueError(f"empty allow-list entry {text!r}")
    return AllowEntry(host.lower().rstrip("."), None, port)


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, int(port)
    return entry, None  # a bare name, IPv4, or unbracketed IPv6 (no port then)


Resolve = Callable[[str, int], Awaitable[Sequence[str]]]


class SsrfGuard:
    """Resolves a destination and returns the addresses it may connect to, or refuses it."""

    def __init__(self, allow: Iterable[str], resolve: Resolve) -> None:
        self.allow = tuple(parse_allow_entry(entry) for entry in allow)
        self._resolve = resolve

    def refusal(self, host: str, ip: IPAddress, port: int) -> str | None:
        """Why ``ip`` (reached as ``host:port``) is refused, or None when it may be reached."""
        reason = classify(ip)
        if reason is None or any(entry.allows(host, ip, port) for entry in self.allow):
            return None
        return reason

    async def vet(self, host: str, port: int) -> list[IPAddress]:
        """Every address of ``host``, all checked; raises :class:`DestinationRefused`."""
        literal = parse_ip(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                answers = await self._resolve(host, port)
            except OSError as exc:
                raise DestinationRefused(f"cannot resolve {host}: {exc}") from exc
            addresses = list(dict.fromkeys(ip for ip in map(parse_ip, answers) if ip is not None))
            if not addresses:
                raise DestinationRefused(f"{host} resolves to no address")
        for ip in addresses:
            reason = self.refusal(host, ip, port)
            if reason is not None:
                shown = host if literal is not None else f"{host} (resolves to {ip})"
                raise DestinationRefused(f"destination {shown} port {port} refused: {reason}")
        return addresses


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host`` (the guard's default resolver)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]
