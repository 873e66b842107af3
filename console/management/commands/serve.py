"""`manage.py serve`: migrate, make the first admin, seed the demo models, then serve everything in one process.

The first three steps run once per database even when replicas start together (console/hosting/startup.py).
With `--workers N` this process prepares the database, then runs N serving processes on the port
(console/hosting/workers.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.accounts.first_admin import ensure_admin
from console.config import ACCESS_LOG_FORMATS, MAX_ACCESS_LOG_SAMPLE, MAX_WORKERS, InferaSettings, demo_models
from console.env import env_int, env_str
from console.hosting.startup import MigrationsMissing, start_up_lock, wait_for_migrations
from console.hosting.workers import die_with_supervisor, run_workers
from console.peers.identity import ProcessIdentity
from engine.api import (
    SettingError,
    parse_bool,
    read_header_rules,
    read_memory_budget,
    read_model_control,
    read_trace_start_up,
)


class Command(BaseCommand):
    help = (
        "Apply migrations, create the user admin if no admin exists, seed the demo models, and serve the "
        "console, the API, /v2 and WebSockets from one ASGI process in the foreground."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=None, help="address to listen on (default: $HOST or 127.0.0.1)")
        parser.add_argument("--port", type=int, default=None, help="port to listen on (default: $PORT or 8000)")
        parser.add_argument(
            "--server",
            choices=["uvicorn", "daphne"],
            default="uvicorn",
            help="ASGI server: uvicorn (default, fastest here) or daphne (Channels' own)",
        )
        parser.add_argument(
            "--grpc-port",
            type=int,
            default=None,
            help="port of the gRPC front end on the same host (default: $INFERA_GRPC_PORT or 8001; 0 turns it off)",
        )
        parser.add_argument(
            "--no-seed", action="store_true", help="do not write the demo models (as INFERA_SEED_DEMO=false)"
        )
        parser.add_argument(
            "--demo-models",
            default=None,
            metavar="NAME,...",
            help="the demo models to seed, comma-separated (default: $INFERA_DEMO_MODELS or all of them)",
        )
        parser.add_argument("--no-access-log", action="store_true", help="do not log each request")
        parser.add_argument(
            "--access-log-format",
            choices=ACCESS_LOG_FORMATS,
            default=None,
            help="access lines as the server writes them or as JSON lines (default: $INFERA_ACCESS_LOG_FORMAT or text)",
        )
        parser.add_argument(
            "--access-log-sample",
            type=int,
            default=None,
            metavar="N",
            help="write one access line in N, with the count it stands for (default: $INFERA_ACCESS_LOG_SAMPLE or 1)",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=None,
            help="serving processes sharing the port, each with its own engine (default: $INFERA_WORKERS or 1)",
        )
        parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # set by the supervisor
        parser.add_argument(
            "--trace-config",
            action="append",
            default=None,
            metavar="[triton,]SETTING=VALUE",
            help="a trace setting at start-up as Triton takes it, e.g. level=TIMESTAMPS rate=1 triton,file=trace.json "
            "(repeatable; in place of $INFERA_TRACE_CONFIG)",
        )
        for protocol, flag, what in (
            ("http", "http-restricted-api", "api"),
            ("grpc", "grpc-restricted-protocol", "protocol"),
        ):
            parser.add_argument(
                f"--{flag}",
                action="append",
                default=None,
                metavar="CATEGORIES:HEADER=VALUE",
                help=f"Triton's restricted {what}s: requests of these categories (comma-separated: health, metadata, "
                "inference, shared-memory, model-config, model-repository, statistics, trace, logging) need the "
                f"header with this value, besides their token (repeatable; in place of ${flag_variable(flag)})",
            )
            forward = f"{protocol}-header-forward-pattern"
            parser.add_argument(
                f"--{forward}",
                default=None,
                metavar="REGEX",
                help=f"{protocol.upper()} headers whose names match become parameters of inference requests "
                f"(never authorization, cookie or a restricted header; in place of ${flag_variable(forward)})",
            )
        parser.add_argument(
            "--allow-client-shm",
            default=None,
            metavar="true|false",
            help="let clients register, unregister and use system shared memory regions, as Triton's flag "
            "(default: $INFERA_ALLOW_CLIENT_SHM or false)",
        )
        parser.add_argument(
            "--memory-budget-mb",
            default=None,
            metavar="MIB",
            help="host memory loaded models may be charged; on-demand models are evicted to stay under it (in "
            "place of $INFERA_MEMORY_BUDGET_MB; each worker of --workers has its own)",
        )
        parser.add_argument(
            "--gpu-memory-budget",
            default=None,
            metavar="BYTES|FRACTION",
            help="each GPU's budget, in bytes or a fraction of its memory (in place of $INFERA_GPU_MEMORY_BUDGET)",
        )
        parser.add_argument(
            "--model-control-mode",
            default=None,
            metavar="none|poll|explicit",
            help="Triton's model control: explicit takes /v2 and gRPC repository load/unload; none and poll refuse "
            "them, poll also applies what changes in --model-repository (default: $INFERA_MODEL_CONTROL_MODE or "
            "explicit)",
        )
        parser.add_argument(
            "--load-model",
            action="append",
            default=None,
            metavar="MODEL",
            help="explicit mode: a registered model to load at start-up, '*' for every one (repeatable; in place "
            "of $INFERA_LOAD_MODELS)",
        )
        parser.add_argument(
            "--repository-poll-secs",
            default=None,
            metavar="SECONDS",
            help="poll mode: seconds between two looks at --model-repository (default: $INFERA_REPOSITORY_POLL_SECS "
            "or 15)",
        )
        parser.add_argument(
            "--model-repository",
            default=None,
            metavar="FOLDER",
            help="poll mode: the Triton-layout folder watched, its models imported into the registry (default: "
            "$INFERA_MODEL_REPOSITORY)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host = options["host"] or env_str("HOST") or "127.0.0.1"
        port = options["port"] or env_int("PORT", 8000, minimum=1, maximum=65535)
        if not 0 < port < 65536:
            raise CommandError(f"--port must be between 1 and 65535, got {port}")
        infera = settings.INFERA
        if options["grpc_port"] is not None:
            if not 0 <= options["grpc_port"] < 65536:
                raise CommandError(f"--grpc-port must be between 0 and 65535, got {options['grpc_port']}")
            infera = infera.replace(grpc=dataclasses.replace(infera.engine.grpc, port=options["grpc_port"]))
        if options["trace_config"]:
            try:
                infera = infera.replace(trace_start_up=read_trace_start_up(os.environ, options["trace_config"]))
            except SettingError as exc:
                raise CommandError(str(exc)) from None
        if options["allow_client_shm"] is not None:
            try:
                allowed = parse_bool("--allow-client-shm", options["allow_client_shm"])
            except SettingError as exc:
                raise CommandError(str(exc)) from None
            infera = infera.replace(shared_memory=dataclasses.replace(infera.engine.shared_memory, allowed=allowed))
        try:
            infera = infera.replace(**header_rules(options), **model_control(options), **memory_budget(options))
        except SettingError as exc:
            raise CommandError(str(exc)) from None
        if options["demo_models"] is not None:
            try:
                infera = infera.replace(demo_models=demo_models(options["demo_models"].split(","), "--demo-models"))
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        if options["access_log_format"] is not None:
            infera = infera.replace(access_log_format=options["access_log_format"])
        sample = options["access_log_sample"]
        if sample is not None:
            if not 1 <= sample <= MAX_ACCESS_LOG_SAMPLE:
                raise CommandError(f"--access-log-sample must be between 1 and {MAX_ACCESS_LOG_SAMPLE}, got {sample}")
            infera = infera.replace(access_log_sample=sample)
        workers = infera.workers if options["workers"] is None else options["workers"]
        if not 1 <= workers <= MAX_WORKERS:
            raise CommandError(f"--workers must be between 1 and {MAX_WORKERS}, got {workers}")
        # as other replicas and people reach it: every worker of a supervisor shares the supervisor's
        infera = infera.replace(listen_address=shown_address(host, port))
        if options["worker"] is not None:  # one of a supervisor's workers: the database is prepared
            die_with_supervisor()
            identity = ProcessIdentity.of_worker(infera.replica_name, options["worker"], workers)
            self._serve(infera, host, port, options, identity)
            return

        with start_up_lock(on_wait=lambda: self._say("Another replica is preparing the database; waiting for it.")):
            self._migrate(infera.migrate)
            self._ensure_admin()
            if infera.seed_demo and not options["no_seed"]:
                call_command("seed_demo", models=",".join(infera.demo_models))
        shown_host = f"[{host}]" if ":" in host else host
        grpc_port = infera.engine.grpc.port
        self.stdout.write(
            f"Infera serves on http://{shown_host}:{port}/ (console), /v2 (inference), /metrics "
            f"with {options['server']}"
            + (f"; gRPC on {shown_host}:{grpc_port}" if grpc_port else "; gRPC off")
            + f"; models from {infera.model_store}"
            + (f"; {workers} workers" if workers > 1 else "")
        )
        self.stdout.flush()
        if workers > 1:
            try:
                status = run_workers(host, port, workers, infera, options)
            except OSError as exc:  # a port taken by another program
                raise CommandError(exc.strerror) from None
            if status:
                raise SystemExit(status)
            return
        self._serve(infera, host, port, options, None)

    def _serve(
        self, infera: InferaSettings, host: str, port: int, options: dict[str, Any], identity: ProcessIdentity | None
    ) -> None:
        access_log = not options["no_access_log"]
        if options["server"] == "daphne":
            from console.hosting.daphne_runner import run_daphne

            run_daphne(infera, host, port, access_log=access_log, identity=identity)
        else:
            from console.hosting.uvicorn_runner import run_uvicorn

            run_uvicorn(infera, host, port, access_log=access_log, identity=identity)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _migrate(self, migrate: bool) -> None:
        if migrate:
            call_command("migrate", interactive=False, verbosity=0)
            self._say("Database is up to date.")
            return
        try:
            wait_for_migrations(
                on_wait=lambda missing: self._say(
                    f"INFERA_MIGRATE=false: waiting for {len(missing)} migrations to be applied by another process."
                )
            )
        except MigrationsMissing as exc:
            raise CommandError(str(exc)) from None
        self._say("Database is up to date (migrated by another process).")

    def _ensure_admin(self) -> None:
        try:
            created = ensure_admin(env_str("INFERA_ADMIN_PASSWORD"))
        except RuntimeError as exc:
            self.stderr.write(f"Warning: {exc}")
            return
        if created is None:
            return
        if created.generated_password:
            self.stdout.write(
                self.style.WARNING(
                    f"Created the user '{created.username}' with the password {created.generated_password}\n"
                    "  It is shown only this once: sign in and change it (Account > Change password)."
                )
            )
        else:
            self.stdout.write(f"Created the user '{created.username}' with the password INFERA_ADMIN_PASSWORD.")


def flag_variable(flag: str) -> str:
    return "INFERA_" + flag.upper().replace("-", "_")


def header_rules(options: dict[str, Any]) -> dict[str, Any]:
    """The engine's header rules the flags set (each in place of its variable), as InferaSettings.replace takes them."""
    changes = {}
    for protocol, restricted in (("http", "http_restricted_api"), ("grpc", "grpc_restricted_protocol")):
        pattern = options.get(f"{protocol}_header_forward_pattern")
        if options.get(restricted) is not None or pattern is not None:
            changes[f"{protocol}_headers"] = read_header_rules(os.environ, protocol, options.get(restricted), pattern)
    return changes


def model_control(options: dict[str, Any]) -> dict[str, Any]:
    """The engine's model control the flags set (each in place of its variable), as InferaSettings.replace takes it."""
    flags = ("model_control_mode", "load_model", "repository_poll_secs", "model_repository")
    if all(options.get(flag) is None for flag in flags):
        return {}
    mode, load_models, poll_seconds, repository = (options.get(flag) for flag in flags)
    return {"model_control": read_model_control(os.environ, mode, load_models, poll_seconds, repository)}


def memory_budget(options: dict[str, Any]) -> dict[str, Any]:
    """The memory budget the flags set (each in place of its variable), as InferaSettings.replace takes it."""
    flags = {"memory_budget_mb": "INFERA_MEMORY_BUDGET_MB", "gpu_memory_budget": "INFERA_GPU_MEMORY_BUDGET"}
    given = {variable: str(options[flag]) for flag, variable in flags.items() if options.get(flag) is not None}
    return {"memory": read_memory_budget({**os.environ, **given})} if given else {}


def shown_address(host: str, port: int) -> str:
    """host:port as other replicas and people reach it (a wildcard address stands for this host's own)."""
    # a comparison with the wildcard addresses, nothing binds here (bandit B104)
    if host in ("0.0.0.0", "::", ""):  # nosec B104
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = socket.gethostname()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
