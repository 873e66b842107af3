"""Hosting the process: the Runtime and the ASGI application, the uvicorn and daphne runners, their limits, the
graceful shutdown and the workers' supervisor."""
