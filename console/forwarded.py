"""The client's own address and scheme behind a trusted proxy: X-Forwarded-For and X-Forwarded-Proto are read only
from peers in INFERA_TRUSTED_PROXIES, for every server (uvicorn, daphne) and every path alike.

Behind a load balancer (HAProxy, an ingress) every connection comes from the balancer, so without this the sign-in
lockout and the API rate would count every client as one, and the access log would name the balancer. The
forwarded list is read from the right: the first address that is not itself a trusted proxy is the client (the
left-most entries are whatever the client claimed, and a client can claim anything).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, MutableMapping
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(items: Iterable[str]) -> tuple[Network, ...]:
    """Addresses and CIDR networks (`10.0.0.0/8`, `127.0.0.1`); ValueError names an item that is neither."""
    networks = []
    for item in items:
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is neither an IP address nor a network like 10.0.0.0/8") from None
    return tuple(networks)


def _is_trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def forwarded_client(forwarded_for: str, peer: str, networks: tuple[Network, ...]) -> str:
    """The client's address from an X-Forwarded-For value a trusted `peer` sent: the right-most entry that is not a
    trusted proxy; the peer when the header has no usable entry."""
    client = peer
    for entry in reversed(forwarded_for.split(",")):
        address = entry.strip()
        if address.startswith("[") and "]" in address:  # [v6]:port, as some proxies write it
            address = address[1 : address.index("]")]
        try:
            ipaddress.ip_address(address)
        except ValueError:
            break  # garbage: nothing to its left can be believed either
        client = address
        if not _is_trusted(address, networks):
            break
    return client


class ForwardedHeaders:
    """Rewrites a connection's scope (`client`, `scheme`) from the forwarding headers of a trusted proxy."""

    def __init__(self, networks: tuple[Network, ...]) -> None:
        self.networks = networks

    def apply(self, scope: MutableMapping[str, Any]) -> None:
        if not self.networks:
            return
        client = scope.get("client")
        if not client or not _is_trusted(client[0], self.networks):
            return
        forwarded_for = proto = None
        for name, value in scope.get("headers", ()):
            if name == b"x-forwarded-for":  # several headers are one list, in order
                text = value.decode("latin-1")
                forwarded_for = text if forwarded_for is None else f"{forwarded_for},{text}"
            elif name == b"x-forwarded-proto":
                proto = value.decode("latin-1").split(",")[-1].strip().lower()
        if forwarded_for is not None:
            scope["client"] = (forwarded_client(forwarded_for, client[0], self.networks), 0)
        if proto in ("http", "https"):
            scope["scheme"] = proto if scope["type"] == "http" else {"http": "ws", "https": "wss"}[proto]
