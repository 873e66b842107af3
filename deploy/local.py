"""`python -m deploy.local --replicas N`: N `manage.py serve` replicas on loopback behind HAProxy, on one PostgreSQL
database, one Redis and one model store; Ctrl-C (or SIGTERM) stops everything it started.

The cluster itself is deploy/cluster.py's `LocalCluster` (the tests and the bench use it too); this is its command.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from deploy.cluster import DEFAULT_DATABASE, DEFAULT_POSTGRES, DEFAULT_REDIS, ClusterError, LocalCluster
from deploy.processes import ROOT


def describe(cluster: LocalCluster) -> str:
    """What `python -m deploy.local` prints once everything answers."""
    count = len(cluster.replicas)
    lines = [f"Infera: {count} replica{'s' if count > 1 else ''} behind HAProxy", f"  balancer   {cluster.url}/"]
    for replica in cluster.replicas:
        lines.append(f"  {replica.name:<10} {replica.url}/  gRPC {replica.grpc_address}  log {replica.log_path}")
    lines += [
        f"  database   {cluster.database_url}",
        f"  Redis      {cluster.redis_url}",
        f"  models     {cluster.store}",
        f"  sign in as admin, password in {cluster.admin_password_file}",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local", description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3, help="how many serving processes (default 3)")
    parser.add_argument("--port", type=int, default=8080, help="the balancer's port (default 8080; 0: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address everything listens on (default 127.0.0.1)")
    parser.add_argument("--database", default=DEFAULT_DATABASE, help=f"the database (default {DEFAULT_DATABASE})")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help=f"PostgreSQL server (default {DEFAULT_POSTGRES})")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help=f"Redis (default {DEFAULT_REDIS})")
    parser.add_argument("--workdir", type=Path, default=ROOT / "var" / "cluster", help="model store, logs, secrets")
    parser.add_argument("--fresh", action="store_true", help="drop the database and the model store first")
    parser.add_argument("--seed-demo", action="store_true", help="seed the demo models (once, by the first replica)")
    parser.add_argument("--access-log", action="store_true", help="log each request in the replicas' logs")
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error(f"--replicas must be at least 1, got {args.replicas}")
    if not 0 <= args.port < 65536:
        parser.error(f"--port must be between 0 and 65535, got {args.port}")

    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stopping.is_set():
            return
        stopping.set()
        raise KeyboardInterrupt  # ends start() or the wait below; `finally` stops what started

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster = LocalCluster(
        args.replicas,
        workdir=args.workdir,
        postgres=args.postgres,
        database=args.database,
        redis_url=args.redis_url,
        host=args.host,
        port=args.port,
        fresh=args.fresh,
        seed_demo=args.seed_demo,
        access_log=args.access_log,
    )
    plural = "s" if args.replicas > 1 else ""
    print(f"Starting {args.replicas} replica{plural} (logs under {cluster.workdir}) ...", flush=True)
    try:
        cluster.start()
        print(describe(cluster), flush=True)
        reported: set[str] = set()
        while not stopping.wait(1.0):
            for replica in cluster.replicas:
                if not replica.running and replica.name not in reported:
                    reported.add(replica.name)
                    code = replica.process.returncode if replica.process else None
                    print(f"{replica.name} exited ({code}); see {replica.log_path}", flush=True)
    except KeyboardInterrupt:
        pass
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the replicas are draining: let them
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("Stopping the cluster ...", flush=True)
        cluster.stop()
        print("Stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
