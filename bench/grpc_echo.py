"""The gRPC ceiling: a bare grpc.aio server answering ModelInfer with a canned response, on the same event loop kind.

`python -m bench.grpc_echo PORT MODEL` serves the response Infera gives for the bench's request to MODEL, so h2load
measures what grpc.aio and the loop cost with no engine behind them, next to Infera in the same run.
"""

from __future__ import annotations

import sys

import grpc

from engine.proto import grpc_messages as messages


async def serve(port: int, model: str) -> None:
    from bench.models import MODELS, sample_inputs

    spec = MODELS[model]
    response = messages.ModelInferResponse(model_name=model, model_version="1")
    for name, shape in spec.outputs.items():
        array = sample_inputs(spec, 1)[next(iter(spec.inputs))]
        response.outputs.add(name=name, datatype=spec.datatype, shape=[1, *shape])
        response.raw_output_contents.append(bytes(array.dtype.itemsize * int(__import__("math").prod(shape))))
    types = messages.method_types()

    async def infer(request, context):
        return response

    async def live(request, context):
        return types["ServerLive"][1](live=True)

    handlers = {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(
            infer, types["ModelInfer"][0].FromString, types["ModelInfer"][1].SerializeToString
        ),
        "ServerLive": grpc.unary_unary_rpc_method_handler(
            live, types["ServerLive"][0].FromString, types["ServerLive"][1].SerializeToString
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(messages.SERVICE, handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve(int(sys.argv[1]), sys.argv[2]))
