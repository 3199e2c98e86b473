"""A network partition between one process and the broker: a namespace, a veth pair, a drop rule.

:func:`namespace` creates a network namespace ``tw-<id>`` joined to the host by a veth pair
with a /30 of its own (host side ``.1``, namespace side ``.2``; nothing else is routed), and
removes both afterwards. A process started with ``ip netns exec <ns> ...`` reaches only the
host-side address, where the test's own broker has a listener (``faults.OwnBroker``).

:class:`Partition` cuts that link and heals it. The drop rule is, in order of preference:

* ``nft``: a table in the namespace dropping everything to and from the host address;
* ``iptables``: the same as two DROP rules in the namespace;
* ``neigh``: when neither tool is installed, a permanent neighbour entry with a MAC address
  nobody owns, on both ends of the veth. Frames still leave, but no interface accepts them
  (the kernel discards frames addressed to another host), so both directions are silently
  dropped, exactly like a DROP rule: open connections stall, new ones time out. Removing
  the entries heals the link.

Everything stays inside the /30 created here and 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

_BOGUS_MAC = "02:00:5e:00:53:01"  # locally administered, owned by no interface here
_CANDIDATE_NETS = [f"10.{a}.{b}.0/30" for a in (231, 232, 233) for b in range(16, 32)]


class NetnsUnavailableError(RuntimeError):
    """Network namespaces cannot be created here (not root, no iproute2, no kernel support)."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=30)


def unavailable_reason() -> str | None:
    """Why a namespace partition cannot run here, or None."""
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed (Debian package: iproute2)"
    probe = f"tw-probe-{uuid.uuid4().hex[:6]}"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


def drop_backend() -> str:
    """The drop rule this machine supports: ``nft``, ``iptables`` or ``neigh`` (iproute2 only)."""
    for tool in ("nft", "iptables"):
        if shutil.which(tool) is not None:
            return tool
    return "neigh"


@dataclass(frozen=True)
class Namespace:
    name: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str

    def exec_prefix(self) -> tuple[str, ...]:
        """argv prefix that runs a command inside the namespace."""
        return ("ip", "netns", "exec", self.name)

    def ns(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(*self.exec_prefix(), *argv, check=check)


def _free_net() -> ipaddress.IPv4Network:
    used = _run("ip", "-o", "-4", "addr", "show").stdout
    routes = _run("ip", "-4", "route", "show").stdout
    for text in _CANDIDATE_NETS:
        net = ipaddress.IPv4Network(text)
        prefix = str(net.network_address).rsplit(".", 1)[0] + "."
        if prefix not in used and prefix not in routes:
            return net
    raise NetnsUnavailableError("no free /30 among the candidate nets")


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    """A namespace joined to the host by a veth pair on a fresh /30; removed on exit."""
    reason = unavailable_reason()
    if reason is not None:
        raise NetnsUnavailableError(reason)
    tag = uuid.uuid4().hex[:6]
    hosts = list(_free_net().hosts())
    ns = Namespace(f"tw-{tag}", f"twh{tag}", f"twn{tag}", str(hosts[0]), str(hosts[1]))
    try:
        _run("ip", "netns", "add", ns.name)
        _run("ip", "link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if)
        _run("ip", "link", "set", ns.ns_if, "netns", ns.name)
        _run("ip", "addr", "add", f"{ns.host_ip}/30", "dev", ns.host_if)
        _run("ip", "link", "set", ns.host_if, "up")
        ns.ns("ip", "addr", "add", f"{ns.ns_ip}/30", "dev", ns.ns_if)
        ns.ns("ip", "link", "set", ns.ns_if, "up")
        ns.ns("ip", "link", "set", "lo", "up")
        yield ns
    finally:
        _run("ip", "link", "del", ns.host_if, check=False)
        _run("ip", "netns", "del", ns.name, check=False)


class Partition:
    """Cut and heal the veth link of ``ns`` with the best drop rule available."""

    def __init__(self, ns: Namespace, backend: str | None = None) -> None:
        self.ns = ns
        self.backend = backend or drop_backend()
        self.active = False
        self.cuts = 0

    def cut(self) -> None:
        getattr(self, f"_cut_{self.backend}")()
        self.active = True
        self.cuts += 1

    def heal(self) -> None:
        if self.active:
            getattr(self, f"_heal_{self.backend}")()
            self.active = False

    @contextlib.contextmanager
    def cutting(self) -> Iterator[Partition]:
        self.cut()
        try:
            yield self
        finally:
            self.heal()

    # -- nft ------------------------------------------------------------------------------

    def _cut_nft(self) -> None:
        host = self.ns.host_ip
        script = (
            "table inet tw_chaos {\n"
            f"  chain input {{ type filter hook input priority 0; ip saddr {host} drop; }}\n"
            f"  chain output {{ type filter hook output priority 0; ip daddr {host} drop; }}\n"
            "}\n"
        )
        subprocess.run([*self.ns.exec_prefix(), "nft", "-f", "-"], input=script, text=True, check=True)

    def _heal_nft(self) -> None:
        self.ns.ns("nft", "delete", "table", "inet", "tw_chaos")

    # -- iptables --------------------------------------------------------------------------

    def _cut_iptables(self) -> None:
        self.ns.ns("iptables", "-I", "INPUT", "-s", self.ns.host_ip, "-j", "DROP")
        self.ns.ns("iptables", "-I", "OUTPUT", "-d", self.ns.host_ip, "-j", "DROP")

    def _heal_iptables(self) -> None:
        self.ns.ns("iptables", "-D", "INPUT", "-s", self.ns.host_ip, "-j", "DROP")
        self.ns.ns("iptables", "-D", "OUTPUT", "-d", self.ns.host_ip, "-j", "DROP")

    # -- neighbour entries (iproute2 only) --------------------------------------------------

    def _cut_neigh(self) -> None:
        ns = self.ns
        ns.ns("ip", "neigh", "replace", ns.host_ip, "lladdr", _BOGUS_MAC, "dev", ns.ns_if, "nud", "permanent")
        _run("ip", "neigh", "replace", ns.ns_ip, "lladdr", _BOGUS_MAC, "dev", ns.host_if, "nud", "permanent")

    def _heal_neigh(self) -> None:
        ns = self.ns
        ns.ns("ip", "neigh", "del", ns.host_ip, "dev", ns.ns_if, check=False)
        _run("ip", "neigh", "del", ns.ns_ip, "dev", ns.host_if, check=False)
