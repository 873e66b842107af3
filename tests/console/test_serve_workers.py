"""`manage.py serve --workers 2` on the default install (SQLite, no Redis): two workers on one port, each its own
engine, converging through the registry and the workers' sockets, counted apart on /metrics, drained by SIGTERM.

Each test talks to one worker at a time on a keep-alive connection it has identified (the monitoring page names the
process that answers it); a new connection lands on whichever worker the kernel picks. The server is shared by the
module; the last test stops it.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil
import pytest

from tests.conftest import ServerProcess, manage_command, serve_process
from tests.console.live_http import Answer, connect, metric, session_cookie
from tests.console.test_graceful_shutdown import in_background, survivors, wait_until_refused
from tests.engine.gated_model import GatedModel
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

REPLICA = "box"
WORKERS = (f"{REPLICA}-w0", f"{REPLICA}-w1")
DEADLINE_S = 60  # a bound on waiting for another process, never a pause
SIMPLE = json.dumps(
    {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))} for n in ("INPUT0", "INPUT1")
        ]
    }
)
GATED = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [7.0]}]})


@dataclass
class OnWorker:
    """A keep-alive connection to one known worker."""

    name: str
    connection: http.client.HTTPConnection
    cookie: str
    key: str

    def ask(self, method: str, path: str, body: str | None = None, auth: bool = False, last: bool = False) -> Answer:
        sock = self.connection.sock
        assert sock is not None  # still the identified connection: a closed one would reopen to any worker
        headers = {"Content-Type": "application/json"} if body is not None else {}
        headers |= {"Authorization": f"Token {self.key}"} if auth else {"Cookie": self.cookie}
        self.connection.request(method, path, body=body, headers=headers)
        response = self.connection.getresponse()
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        if not last:  # the connection stays open for the next question (a draining worker closes it after the last)
            assert self.connection.sock is sock and answer.headers.get("connection") != "close"
        return answer


@dataclass
class Workers:
    server: ServerProcess
    gated: GatedModel
    cookie: str
    key: str
    sent: Counter  # requests to `simple` version 1 answered by each worker
    manage: Callable[..., str]  # manage.py against the workers' var/ and settings

    def connect_to(self, name: str) -> OnWorker:
        """A connection to worker `name` (new connections land on a worker at random: try until one does)."""
        for _ in range(100):
            connection = connect(self.server)
            found = OnWorker(self.identify(connection), connection, self.cookie, self.key)
            if found.name == name:
                return found
            connection.close()
        pytest.fail(f"100 connections and none reached worker {name}")

    def identify(self, connection: http.client.HTTPConnection) -> str:
        connection.request("GET", "/monitoring/", headers={"Cookie": self.cookie})
        response = connection.getresponse()
        page = response.read().decode()
        assert response.status == 200, page[:500]
        return re.search(r'id="answered-by" data-process="([^"]*)"', page).group(1)


def until(check, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling other processes, bounded by the deadline


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def workers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    """Two workers of one replica under uvicorn, then daphne (one reactor per worker)."""
    root = tmp_path_factory.mktemp(f"workers-{request.param}")
    var_dir = root / "var"
    gated = GatedModel(root / "pipes")
    store = var_dir / "models"
    make_simple_onnx(store, version=1)
    make_simple_onnx(store, version=2, write_config=False)
    gated.write(store)
    env = {
        "INFERA_DISABLE_NVML": "1",
        "INFERA_INFERENCE_AUTH": "none",
        "INFERA_SECURE_COOKIES": "false",
        "INFERA_REPLICA_NAME": REPLICA,
        "INFERA_SHUTDOWN_GRACE_SECONDS": "600",
        # no periodic pass within a test: what converges, converges on the change notice between the workers
        "INFERA_RECONCILE_SECONDS": "3600",
    }
    manage = manage_command(var_dir, env)
    manage("migrate")
    manage("import_repository", str(store))  # simple v2 (the newest) active, gated v1
    try:
        with serve_process(var_dir, "--no-seed", "--workers", "2", "--server", request.param, env=env) as server:
            until(
                lambda: {dict(k).get("worker") for k in metric(server, "nv_inference_request_success")} >= set(WORKERS),
                "both workers never published their models",
            )
            yield Workers(server, gated, session_cookie(server), manage("issue_token", "admin"), Counter(), manage)
    finally:
        gated.close()


def test_it_answers_from_two_workers_named_after_the_replica(workers):
    seen = set()
    for _ in range(100):
        connection = connect(workers.server)
        seen.add(workers.identify(connection))
        connection.close()
        if seen == set(WORKERS):
            break
    assert seen == set(WORKERS)
    assert "2 workers" in workers.server.log()


def test_each_worker_reports_the_address_it_serves_on(workers):
    port = workers.server.base_url.rsplit(":", 1)[1]
    listed = workers.manage(
        "shell",
        "-c",
        "import json; from console.registry.cluster.models import Replica; "
        "print(json.dumps(sorted([r.name, r.address] for r in Replica.objects.all())))",
    )
    assert json.loads(listed) == [[name, f"127.0.0.1:{port}"] for name in WORKERS]


def test_an_activation_through_one_worker_is_served_by_the_other(workers):
    first, second = workers.connect_to(WORKERS[0]), workers.connect_to(WORKERS[1])
    for each in (first, second):
        assert json.loads(each.ask("POST", "/v2/models/simple/infer", SIMPLE).body)["model_version"] == "2"
    answer = first.ask("POST", "/api/models/simple/versions/1/load", auth=True)
    assert answer.status == 202, answer.body
    for each in (second, first):
        until(
            lambda each=each: each.ask("GET", "/v2/models/simple/versions/1/ready").status == 200, f"{each.name}: no v1"
        )
    until(
        lambda: json.loads(first.ask("GET", "/api/models/simple/versions/1/", auth=True).body)["state"] == "READY",
        "version 1 never became READY in the registry",
    )
    answer = first.ask("POST", "/api/models/simple/versions/1/activate", auth=True)
    assert answer.status in (200, 202), answer.body
    for each in (second, first):
        until(
            lambda each=each: (
                json.loads(each.ask("POST", "/v2/models/simple/infer", SIMPLE).body)["model_version"] == "1"
            ),
            f"{each.name} never switched to version 1",
        )
        workers.sent[each.name] += 1


def test_metrics_count_each_workers_requests_and_the_hosts_devices_once(workers):
    first, second = workers.connect_to(WORKERS[0]), workers.connect_to(WORKERS[1])
    for each, count in ((first, 3), (second, 5)):
        for _ in range(count):
            assert each.ask("POST", "/v2/models/simple/versions/1/infer", SIMPLE).status == 200
        workers.sent[each.name] += count

    def counted() -> dict[str, float]:
        samples = metric(workers.server, "nv_inference_request_success")
        return {
            dict(labels)["worker"]: value
            for labels, value in samples.items()
            if dict(labels)["model"] == "simple" and dict(labels)["version"] == "1"
        }

    until(lambda: counted() == dict(workers.sent), f"/metrics never counted {dict(workers.sent)}: {counted()}")
    assert sum(counted().values()) == sum(workers.sent.values())  # what `sum by (model)` shows
    assert metric(workers.server, "infera_replica_info") == {(("replica", REPLICA),): 1.0}
    assert list(metric(workers.server, "nv_cpu_utilization")) == [()]  # the host's, once, no worker label


def test_sigterm_drains_both_workers_and_exits_0(workers):
    server, gated = workers.server, workers.gated
    on_each = [workers.connect_to(name) for name in WORKERS]
    running = [
        in_background(lambda each=each: each.ask("POST", "/v2/models/gated/infer", GATED, last=True))
        for each in on_each
    ]
    stubs = {gated.wait_started(DEADLINE_S), gated.wait_started(DEADLINE_S)}
    processes = psutil.Process(server.process.pid).children(recursive=True)
    assert len({psutil.Process(pid).ppid() for pid in stubs}) == 2  # a request running in each worker

    server.process.send_signal(signal.SIGTERM)
    wait_until_refused(server)  # both stopped listening
    assert not any(answer.done() for answer in running) and server.process.poll() is None
    gated.release(2)
    for answer in running:
        assert answer.result(timeout=DEADLINE_S).status == 200
    assert server.process.wait(timeout=DEADLINE_S) == 0, server.log()[-3000:]
    assert survivors(processes) == []
    log = server.log()
    assert all(f"worker {name} exited with 0" in log for name in WORKERS)
    assert "Traceback" not in log
