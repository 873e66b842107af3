# Infera on a CUDA runtime: the console, the management API, /v2 and WebSockets from one process on port 8000.
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*

RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# the CUDA build of the torch version requirements.txt pins (==2.13.0 then matches 2.13.0+cu128, so it stays)
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
COPY requirements.txt /app/requirements.txt
RUN pip install --index-url "$TORCH_INDEX" torch==2.13.0 \
    && pip install -r /app/requirements.txt \
    && pip install --no-deps xgrammar==0.2.8

RUN useradd --create-home --uid 10001 infera \
    && mkdir -p /data /models && chown infera:infera /data /models
WORKDIR /app
COPY --chown=infera:infera . /app
USER infera
# compiled now: on Kubernetes the root file system is read-only and nothing could be cached at start
RUN python -m compileall -q console engine manage.py

# /data: database (SQLite by default), secret key; /models: the model store, a Triton-layout repository
ENV INFERA_VAR_DIR=/data INFERA_MODEL_STORE=/models
VOLUME ["/data", "/models"]
# HTTP (console, API, /v2, /metrics) and gRPC
EXPOSE 8000 8001

HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4)"]

CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--port", "8000"]
