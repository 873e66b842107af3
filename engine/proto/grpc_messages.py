"""Triton's gRPC messages (engine/proto/grpc_service.proto) as classes from a descriptor pool of Infera's own.

The descriptors are compiled once into grpc_service.desc (the command is in the .proto file's header). Loading them
into a private pool, not protobuf's default one, lets this process also import tritonclient, whose generated
classes claim the same names (`inference.ModelInferRequest`) in the default pool.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

DESCRIPTOR_SET = Path(__file__).with_name("grpc_service.desc")
SERVICE = "inference.GRPCInferenceService"

POOL = descriptor_pool.DescriptorPool()
_files = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET.read_bytes())
for _file in _files.file:
    POOL.Add(_file)
SERVICE_DESCRIPTOR = POOL.FindServiceByName(SERVICE)


def message(name: str) -> type:
    """The class of message `inference.<name>` (or a full name such as `infera.config.ModelConfig`)."""
    full = name if "." in name else f"inference.{name}"
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full))


ModelInferRequest = message("ModelInferRequest")
ModelInferResponse = message("ModelInferResponse")
ModelStreamInferResponse = message("ModelStreamInferResponse")
InferParameter = message("InferParameter")
ModelConfig = message("infera.config.ModelConfig")


def method_types() -> dict[str, tuple[type, type, bool, bool]]:
    """Every RPC of the service: name -> (request class, response class, client streams, server streams)."""
    return {
        method.name: (
            message_factory.GetMessageClass(method.input_type),
            message_factory.GetMessageClass(method.output_type),
            method.client_streaming,
            method.server_streaming,
        )
        for method in SERVICE_DESCRIPTOR.methods
    }
