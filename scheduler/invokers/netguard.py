"""The SSRF guard of the ``http`` kind: a job may not make cronchain's workers call
private, loopback or link-local addresses (a cloud's metadata service, the database,
an admin port) unless ``CRONCHAIN_HTTP_ALLOW`` lists them.

The check is made on the address actually connected to, after name resolution and on
every redirect, so DNS tricks (a public name resolving to 127.0.0.1, rebinding between
check and use) and IPv4 spelled as an integer or as IPv4-mapped IPv6 do not get through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from cronchain.scheduler.errors import SpecError

Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network


class Refused(OSError):
    """The destination is not a public address and is not allowed."""


def parse_allow(text: str) -> tuple[Network, ...]:
    """``CRONCHAIN_HTTP_ALLOW``: comma-separated addresses or networks (CIDR)."""
    networks = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise SpecError(
                "CRONCHAIN_HTTP_ALLOW", f"{part!r} is not an address or network"
            ) from None
    return tuple(networks)


def _unwrap(address: Address) -> Address:
    """The IPv4 address hidden in an IPv6 one (mapped, 6to4, NAT64 well-known prefix)."""
    if isinstance(address, IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in ipaddress.ip_network("64:ff9b::/96"):
            return IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def refused(address: Address, allow: tuple[Network, ...]) -> bool:
    inner = _unwrap(address)
    if any(inner in net or address in net for net in allow):
        return False
    return not inner.is_global or inner.is_multicast


NUMERIC = socket.AI_NUMERICHOST
# The least time one address of several is given to answer a connection.
MIN_CONNECT_SHARE = 0.25


async def open_connection(
    host: str, port: int, allow: tuple[Network, ...], deadline: float
) -> socket.socket:
    """Like ``socket.create_connection``, on an event loop and only to permitted
    addresses: a connected, non-blocking socket to one of ``host``'s, reached before
    ``deadline`` (a ``time.monotonic()`` instant), which bounds every address tried
    together, so that a name with several unreachable addresses cannot multiply it."""
    loop = asyncio.get_running_loop()
    last: OSError | None = None
    try:  # an address needs no resolver: no trip to the loop's resolving threads
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=NUMERIC)
    except socket.gaierror:
        found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    for index, (family, kind, proto, _, sockaddr) in enumerate(found):
        if (no := _refusal(host, sockaddr, allow)) is not None:
            last = no
            continue
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            if index == len(found) - 1:  # the last: the call's own deadline bounds it
                await loop.sock_connect(sock, sockaddr)
            else:
                async with asyncio.timeout(_share(host, deadline, len(found) - index)):
                    await loop.sock_connect(sock, sockaddr)
            return sock
        except BaseException as err:
            sock.close()
            if not isinstance(err, OSError):  # cancelled: the call's own deadline passed
                raise
            last = err
    raise last or OSError(f"{host} has no address")


def _refusal(host: str, sockaddr: tuple, allow: tuple[Network, ...]) -> Refused | None:
    address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
    if not refused(address, allow):
        return None
    named = address if host.strip("[]") == str(address) else f"{host} ({address})"
    return Refused(f"{named} is not a public address; CRONCHAIN_HTTP_ALLOW can allow it")


def _share(host: str, deadline: float, addresses_left: int) -> float:
    """What one address may take to answer: each address left gets its share of the time
    left, so that one that never answers (a broken IPv6 route listed first) leaves time
    for the next."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"no connection to {host} before the deadline")
    return max(left / addresses_left, min(left, MIN_CONNECT_SHARE))
