"""The SSRF guard: every refused address form, allow-listing, and DNS answers."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from tickwheel.workers.ssrf import DestinationRefused, SsrfGuard, classify, parse_allow_entry, system_resolve

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("100.64.0.1", "shared address space"),
    ("100.127.255.254", "shared address space"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("169.254.169.254", "cloud metadata"),
    ("fd00:ec2::254", "cloud metadata"),
    ("::ffff:127.0.0.1", "loopback (IPv4-mapped form of 127.0.0.1)"),
    ("::ffff:10.0.0.1", "private (IPv4-mapped form of 10.0.0.1)"),
    ("::ffff:169.254.169.254", "cloud metadata (IPv4-mapped form of 169.254.169.254)"),
    ("::ffff:100.64.1.1", "shared address space (IPv4-mapped form of 100.64.1.1)"),
    ("64:ff9b::7f00:1", "loopback (NAT64 form of 127.0.0.1)"),
    ("64:ff9b::a9fe:a9fe", "cloud metadata (NAT64 form of 169.254.169.254)"),
    ("64:ff9b::c0a8:101", "private (NAT64 form of 192.168.1.1)"),
    ("2002:7f00:1::1", "loopback (6to4 form of 127.0.0.1)"),
    ("::7f00:1", "loopback (IPv4-compatible form of 127.0.0.1)"),
    ("2001:db8::1", "reserved"),
]
PUBLIC = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_refused_forms(address: str, reason: str) -> None:
    """Each internal, special or embedded-internal address is refused with its reason."""
    assert classify(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    """Public unicast addresses, also in mapped and NAT64 form, are not refused."""
    assert classify(ipaddress.ip_address(address)) is None


def _resolver(answers: dict[str, Sequence[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in answers:
            raise OSError(f"no such host {host}")
        return answers[host]

    return resolve


async def test_literal_address_refused_with_clear_reason() -> None:
    """An IP literal is judged without DNS and the message names address, port and reason."""
    guard = SsrfGuard((), _resolver({}))
    with pytest.raises(DestinationRefused, match=r"169\.254\.169\.254 port 80 refused: cloud metadata"):
        await guard.vet("169.254.169.254", 80)


async def test_one_bad_address_among_good_ones_refuses_the_host() -> None:
    """A DNS answer mixing a private address among public ones refuses the whole host."""
    guard = SsrfGuard((), _resolver({"mixed.example": ["93.184.216.34", "10.0.0.7", "8.8.8.8"]}))
    with pytest.raises(DestinationRefused, match=r"mixed\.example \(resolves to 10\.0\.0\.7\).*private"):
        await guard.vet("mixed.example", 443)


async def test_all_good_answers_are_returned_for_pinning() -> None:
    """Every vetted address is returned (deduplicated), to be pinned for the connection."""
    guard = SsrfGuard((), _resolver({"ok.example": ["93.184.216.34", "2606:4700::1", "93.184.216.34"]}))
    assert [str(ip) for ip in await guard.vet("ok.example", 443)] == ["93.184.216.34", "2606:4700::1"]


async def test_unresolvable_and_empty_answers_are_refused() -> None:
    """A name that does not resolve, or resolves to nothing, is refused rather than guessed."""
    guard = SsrfGuard((), _resolver({"empty.example": []}))
    with pytest.raises(DestinationRefused, match="cannot resolve"):
        await guard.vet("nowhere.example", 80)
    with pytest.raises(DestinationRefused, match="no address"):
        await guard.vet("empty.example", 80)


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1", "localhost"])
async def test_numeric_and_local_names_resolve_to_loopback_and_are_refused(host: str) -> None:
    """Legacy numeric IPv4 spellings and localhost go through the resolver and are refused."""
    guard = SsrfGuard((), system_resolve)
    with pytest.raises(DestinationRefused, match="loopback"):
        await guard.vet(host, 80)


@pytest.mark.parametrize(
    ("entry", "host", "address", "port", "allowed"),
    [
        ("127.0.0.1", "127.0.0.1", "127.0.0.1", 8080, True),
        ("127.0.0.1:8080", "127.0.0.1", "127.0.0.1", 8080, True),
        ("127.0.0.1:8080", "127.0.0.1", "127.0.0.1", 9090, False),
        ("10.0.0.0/8", "svc.internal", "10.20.30.40", 443, True),
        ("10.0.0.0/8", "svc.internal", "192.168.0.1", 443, False),
        ("[::1]:8080", "::1", "::1", 8080, True),
        ("fd00::/8", "v6.internal", "fd00::5", 80, True),
        ("internal.example:443", "Internal.Example.", "10.1.1.1", 443, True),
        ("internal.example:443", "internal.example", "10.1.1.1", 80, False),
        ("internal.example", "other.example", "10.1.1.1", 443, False),
    ],
)
def test_allow_list_entries(entry: str, host: str, address: str, port: int, allowed: bool) -> None:
    """Allow-list entries match by address/CIDR or host name, and by port when one is given."""
    guard = SsrfGuard([entry], _resolver({}))
    assert (guard.refusal(host, ipaddress.ip_address(address), port) is None) is allowed


async def test_allow_listed_destination_passes_and_others_still_refused() -> None:
    """An allow-listed name with internal addresses passes; the metadata address still does not."""
    guard = SsrfGuard(["svc.internal", "127.0.0.1"], _resolver({"svc.internal": ["10.0.0.5", "10.0.0.6"]}))
    assert len(await guard.vet("svc.internal", 80)) == 2
    assert [str(ip) for ip in await guard.vet("127.0.0.1", 9999)] == ["127.0.0.1"]
    with pytest.raises(DestinationRefused, match="cloud metadata"):
        await guard.vet("169.254.169.254", 80)


def test_bad_allow_entries_are_rejected() -> None:
    """A malformed allow-list entry fails loudly at start-up."""
    with pytest.raises(ValueError, match=r"10\.0\.0\.0/33"):
        parse_allow_entry("10.0.0.0/33")
    with pytest.raises(ValueError, match="notaport"):
        parse_allow_entry("host:notaport")
