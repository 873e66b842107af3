"""HAProxy in front of a local cluster: its config (health-checked round robin) and what its stats socket says."""

from __future__ import annotations

import csv
import io
import socket
from dataclasses import dataclass
from pathlib import Path

# a replica answers /v2/health/ready 503 from the start of its drain and stops listening soon after: two failed
# checks half a second apart take it out, two good ones put it back; a request that finds its connection refused
# or closed unanswered is tried again on another replica
CONFIG = """\
global
    maxconn 4096
    stats socket {socket} mode 600 level admin

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout tunnel 1h
    timeout http-keep-alive 10s
    option redispatch 1
    retries 3
    retry-on conn-failure empty-response
    # the replicas read the client's address from this (INFERA_TRUSTED_PROXIES names HAProxy's)
    option forwardfor

frontend infera
    bind {host}:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk
    http-check send meth GET uri /v2/health/ready
    http-check expect status 200
    default-server check inter 500ms fastinter 250ms downinter 500ms fall 2 rise 2
{servers}
"""


@dataclass(frozen=True)
class Backend:
    """One replica as HAProxy knows it."""

    name: str
    host: str
    port: int


def write_config(path: Path, *, host: str, port: int, backends: list[Backend], stats_socket: Path) -> Path:
    """Write haproxy.cfg for `backends` behind `host:port`."""
    servers = "\n".join(f"    server {b.name} {b.host}:{b.port}" for b in backends)
    path.write_text(CONFIG.format(socket=stats_socket, host=host, port=port, servers=servers), encoding="utf-8")
    return path


def command(stats_socket: Path, line: str, timeout: float = 2.0) -> str:
    """Send one command to HAProxy's stats socket; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(stats_socket))
        conn.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def set_in_rotation(stats_socket: Path, name: str, taking_traffic: bool) -> None:
    """Put a replica in the rotation (health checks decide) or in maintenance (no traffic, whatever its health)."""
    answer = command(stats_socket, f"set server replicas/{name} state {'ready' if taking_traffic else 'maint'}")
    if answer.strip():
        raise RuntimeError(f"HAProxy refused to change {name}: {answer.strip()}")


def server_states(stats_socket: Path, timeout: float = 2.0) -> dict[str, str]:
    """Each replica's state as HAProxy sees it right now (UP, DOWN, MAINT, 'UP 1/2' while rising...), by name."""
    text = command(stats_socket, "show stat", timeout).lstrip("# ")
    rows = csv.DictReader(io.StringIO(text))
    return {
        row["svname"]: row["status"]
        for row in rows
        if row["pxname"] == "replicas" and row["svname"] not in ("FRONTEND", "BACKEND")
    }
