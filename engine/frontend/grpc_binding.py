"""How the gRPC front end takes its port (refused when another process holds it) and answers server reflection."""

from __future__ import annotations

import socket

import grpc
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2

from engine.frontend.grpc_health_service import HEALTH_SERVICE
from engine.proto import grpc_messages as messages

REFLECTION_SERVICES = ("grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection")


def refuse_a_taken_port(host: str, port: int) -> None:
    """OSError when another process listens on host:port. The acceptors bind with SO_REUSEPORT (grpc's default),
    which would let this server share a port with any other of the same user: the clients' calls would be split
    between the two. Triton's bind fails instead, and so does this."""
    for family, kind, proto, _, address in socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection's TIME_WAIT is no owner
            try:
                probe.bind(address)
            except OSError as exc:
                text = f"gRPC port {host}:{port} is in use by another process: {exc.strerror}"
                raise OSError(exc.errno, text) from exc


def enable_reflection(server: grpc.aio.Server) -> None:
    """Server reflection over Infera's own descriptor pool (which also holds health and reflection themselves)."""
    from grpc_reflection.v1alpha import reflection, reflection_pb2

    for module in (health_pb2, reflection_pb2):
        proto = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        try:
            messages.POOL.Add(proto)
        except TypeError:
            pass  # already added by an earlier front end in this process
    reflection.enable_server_reflection(
        (messages.SERVICE, HEALTH_SERVICE, *REFLECTION_SERVICES), server, pool=messages.POOL
    )
