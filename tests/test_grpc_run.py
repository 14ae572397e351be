"""End-to-end: a CLI run with no collectors, fed and controlled over gRPC by other processes.

The tests share one run (``runs``); the stop's test takes it, so a test after it gets a fresh
one, and each test also runs alone.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import re
import subprocess
import threading
import time
import urllib.request

import grpc
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from replay.wire.transport import insert_streams
from services.grpc.client import RelayClient
from tests import diskfaults
from tests.cli_run import CliRun, SharedRun
from tests.conftest import PYTHON, ROOT, cli_env
from tests.grpc_probe import transitions

TOKEN, ACTOR_TOKEN = "test-token", "test-actor-token"
ADDRESS = re.compile(r"gRPC server at (127\.0\.0\.1:\d+)")
METRICS = re.compile(r"Prometheus metrics (?:of run \S+ )?at http://127\.0\.0\.1:(\d+)/metrics")
RUN_ARGS = (
    "--set",
    "collector.num_collectors=0",
    "--set",
    "grpc.port=0",
    "--set",
    f"grpc.token={TOKEN}",
    "--set",
    f"grpc.actor_token={ACTOR_TOKEN}",
    "--set",
    "grpc.max_message_mb=0.25",
    "--set",
    "controller.total_frames=1000000",
    "--set",
    "controller.init_random_frames=500",
    "--set",
    "controller.log_interval_s=0.5",
    "--set",
    "checkpoint.keep=10",
)

pytestmark = pytest.mark.e2e  # a CLI run shared by the module, fed by other processes


def scraped(port: int, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples with ``labels`` in one scrape of the run's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


class Served:
    """A run with no collectors (a :class:`CliRun`), its gRPC address read from its log."""

    def __init__(self, run_dir, *extra: str) -> None:
        self.run_dir = run_dir
        self.cli = CliRun(*RUN_ARGS, *extra, run_dir=run_dir)
        try:
            self.address = self.cli.wait_log(ADDRESS.pattern, timeout=120).group(1)
            self.client = RelayClient(self.address, token=TOKEN)
            self.client.wait_health("SERVING", timeout=120)
        except BaseException:
            self.cli.close()
            raise

    @property
    def process(self):
        return self.cli.process

    @property
    def log(self) -> list[str]:
        return self.cli.log

    def metrics_port(self) -> int:
        return int(self.cli.wait_log(METRICS.pattern, timeout=60).group(1))

    def close(self) -> None:
        self.client.close()
        self.cli.close()


def probe(mode: str, address: str) -> dict:
    result = subprocess.run(
        [PYTHON, str(ROOT / "tests/grpc_probe.py"), mode, address, TOKEN],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The module's shared run: one for all its tests, another after a test has stopped it."""
    with SharedRun(lambda n: Served(tmp_path_factory.mktemp(f"grpc{n}") / "run")) as shared:
        yield shared


@pytest.fixture
def served(runs) -> Served:
    """The shared run, serving."""
    return runs.get()


def test_external_actor_feeds_a_run_without_collectors(served, tmp_path):
    run = served
    token_file = tmp_path / "actor-token"  # the secret stays off the actor's command line
    token_file.write_text(ACTOR_TOKEN + "\n")
    port = run.metrics_port()
    before = run.client.status()
    scraped_before = {
        (name, source): scraped(port, name, source=source)
        for name in ("relayrl_frames_total", "relayrl_transitions_total")
        for source in ("external", "collector")
    }
    result = subprocess.run(
        [PYTHON, "-m", "services.external_actor", "--address", run.address,
         "--token-file", str(token_file), "--frames", "2000", "--batch-frames", "256"],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    actor = json.loads(result.stdout.splitlines()[-1])
    assert actor["frames"] >= 2000 and actor["batches"] >= 8
    assert actor["weight_fetches"] >= 1 and actor["weights_version"] >= 0
    status = run.client.status()
    assert status.state == "running"
    assert status.frames == status.external_frames == status.transitions  # no collectors
    assert status.frames - before.frames == actor["frames"]  # whatever came before this test
    sizes = [now.size - then.size for now, then in zip(status.replay, before.replay, strict=True)]
    assert sum(sizes) == actor["frames"] and min(sizes) > 0  # one writer fills every shard

    def added(name: str, source: str) -> float:
        return scraped(port, name, source=source) - scraped_before[(name, source)]

    assert added("relayrl_frames_total", "external") == actor["frames"]
    assert added("relayrl_transitions_total", "external") == actor["frames"]
    assert scraped(port, "relayrl_frames_total", source="collector") == 0


def test_inserts_are_stored_counted_and_retries_acknowledged(served):
    out = probe("insert", served.address)
    assert out["items"] == [300, 2000] and out["counted"] == 2300
    assert out["writer_ids"] == ["external/probe-insert"] * 2
    assert out["frames_after"] - out["frames_before"] == 2300
    assert out["external_after"] == out["frames_after"]
    assert out["replay_after"] - out["replay_before"] == 2300
    assert out["total"] == out["frames_after"]
    assert out["retry_counted"] == 0 and out["retry_duplicate"] == [True, True]


def test_weights_newer_than_a_version_load_into_a_policy_that_acts(served):
    out = probe("weights", served.address)
    assert out["generation"] == 0 and out["version"] >= 0
    assert "0.weight" in out["keys"]
    assert len(out["actions"]) == 5 and set(out["actions"]) <= {0, 1}
    assert out["not_newer_again"]


def test_bad_inputs_are_refused_and_nothing_is_stored(served):
    out = probe("bad", served.address)
    cases = out["cases"]
    expected = {
        "unknown_dtype": "'observation'",
        "shape": "'observation'",
        "missing_key": "'reward'",
        "nan_reward": "'reward'",
        "too_large": "grpc.max_message_mb",
    }
    for case, named in expected.items():
        code, details = cases[case]
        assert code == "INVALID_ARGUMENT", (case, code, details)
        assert named in details and "key '" in details, (case, details)
    assert "complex64" in cases["unknown_dtype"][1]
    hostile = {
        "nan_return": ("INVALID_ARGUMENT", "episode_returns:"),
        "zero_length": ("INVALID_ARGUMENT", "episode_lengths:"),
        "packed_shape": ("INVALID_ARGUMENT", "Tensor.shape: more than"),
        "huge_writer_id": ("INVALID_ARGUMENT", "writer_id: longer than"),
        "oversized": ("RESOURCE_EXHAUSTED", "larger than max"),
        "impostor": ("OK", ""),  # stored as its own writer (see after_poison)
        "seq_jump": ("INVALID_ARGUMENT", "seq:"),
    }
    for case, (code, named) in hostile.items():
        assert cases[case][0] == code and named in cases[case][1], (case, cases[case])
        assert len(cases[case][1]) < 400, case  # echoed strings are cut short
    for case in ("no_token", "wrong_token", "no_token_status", "wrong_token_status"):
        assert cases[case][0] == "UNAUTHENTICATED", (case, cases[case])
    assert cases["no_token_health"][0] == "SERVING"
    assert out["replay_between"] == out["replay_before"]
    assert out["frames_between"] == out["frames_before"]
    assert out["good_counted"] == 64
    assert out["replay_after_good"] == out["replay_before"] + 64
    assert out["retry_duplicate"] == [True]  # the honest retry is still a duplicate
    assert out["after_poison"] == [False]  # the impostor's seq 900 poisoned nothing
    assert out["replay_end"] == out["replay_after_good"] + 2 * 64  # its own, then ours
    assert out["frames_end"] == out["frames_between"] + 3 * 64


def consistent_cut(path: str) -> int:
    """Checks a checkpoint's counters against its replay files; returns its frames."""
    counters = json.loads((ROOT / path / "manifest.json").read_text())["counters"]
    tables = [json.loads(p.read_text()) for p in (ROOT / path).glob("replay-*/table.json")]
    assert len(tables) == counters["replay_shards"] == 2
    assert sum(t["write_count"] for t in tables) == counters["transitions"]
    assert counters["transitions"] == counters["collected_frames"] == counters["external_frames"]
    return counters["collected_frames"]


def test_control_is_answered_while_the_insert_capacity_is_taken(served):
    run = served
    release = threading.Event()
    # One address's share (grpc.calls_per_peer: half of grpc.max_workers, 16), within the
    # Insert streams' (insert_streams(16)).
    streams = min(16 // 2, insert_streams(16))
    with RelayClient(run.address, token=ACTOR_TOKEN) as holder:

        def idle():
            release.wait(60)
            yield from ()

        held = [
            holder.experience.Insert.future(idle(), metadata=holder.metadata, timeout=90)
            for _ in range(streams)
        ]
        try:
            with RelayClient(run.address, token=ACTOR_TOKEN) as other:
                exhausted = None
                for _ in range(100):  # until every held stream has its slot
                    try:
                        other.insert([transitions(4)])
                    except grpc.RpcError as err:
                        exhausted = err
                        break
                ended = [f.exception() for f in held if f.done()]
                assert exhausted is not None, ended
                assert exhausted.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                started = time.perf_counter()
                assert run.client.status().state == "running"  # Control still answered
                assert run.client.health() == "SERVING"
                assert time.perf_counter() - started < 5.0
        finally:
            release.set()
        for future in held:  # each stream ends with no batch: an empty, good reply
            assert future.result(timeout=60).frames_counted == 0


def listening(pid: int) -> dict[tuple[str, int], str]:
    """``{(address, port): process name}`` of every socket a process and its descendants bind
    to listen (TCP in LISTEN, UDP bound): the driver, Ray's node processes and workers."""
    root = psutil.Process(pid)
    found = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            name = process.name()
            sockets = process.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # a worker that exited meanwhile
        for sock in sockets:
            if sock.status == psutil.CONN_LISTEN or (sock.laddr and not sock.raddr):
                found[(sock.laddr.ip, sock.laddr.port)] = name
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is IPv4 loopback on a v6 socket
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def test_every_socket_of_the_run_and_its_embedded_ray_listens_on_loopback(served):
    sockets = listening(served.process.pid)
    names = set(sockets.values())
    assert {"gcs_server", "raylet"} <= names, names  # Ray's node processes were listed
    ports = {port for _, port in sockets}
    assert int(served.address.rsplit(":", 1)[1]) in ports  # and the driver's own servers
    assert served.metrics_port() in ports
    beyond = {
        f"{ip}:{port} ({name})" for (ip, port), name in sockets.items() if not is_loopback(ip)
    }
    assert not beyond, f"listening beyond loopback: {sorted(beyond)}"


def test_checkpoint_requests_that_arrive_together_share_a_cut(served):
    client = served.client
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(lambda _: client.checkpoint(), range(8)))
    assert 1 <= len(set(paths)) <= 2  # one cut, and one for requests that came meanwhile
    for path in set(paths):
        consistent_cut(path)


@pytest.fixture(scope="module")
def stopped(runs) -> dict:
    """The shared run checkpointed, then stopped over gRPC while an actor inserts: what was seen.

    Module-scoped: the stop's test and the resume's test read the same stop, in either order.
    """
    run = runs.take()  # stopped here: the next test that needs a live run gets another
    seen: dict = {"run": run}
    with CliRun(
        *("--address", run.address, "--token", ACTOR_TOKEN),
        *("--frames", "10000000", "--batch-frames", "128"),
        module="services.external_actor",
    ) as actor:
        actor.wait_log("inserted", timeout=120)  # the cut comes while the actor keeps inserting
        seen["checkpoint"] = run.client.checkpoint()
        seen["last_checkpoint"] = run.client.status().last_checkpoint
        seen["stop"] = run.client.stop(wait=False)
        seen["health"] = run.client.health()  # from the moment the stop is accepted
        try:
            run.client.insert([transitions(8)])
        except grpc.RpcError as refused:
            seen["insert"] = refused.code()
        seen["code"], seen["summary"] = run.cli.finish(timeout=120)
        seen["actor_code"], seen["actor"] = actor.finish(timeout=120)
        seen["actor_log"] = actor.tail()
    return seen


def test_checkpoint_and_stop_while_an_actor_inserts(stopped):
    run, path, summary = stopped["run"], stopped["checkpoint"], stopped["summary"]
    assert stopped["last_checkpoint"] == path
    frames = consistent_cut(path)
    assert stopped["stop"] == ""
    assert stopped["health"] == "NOT_SERVING"
    assert stopped.get("insert") == grpc.StatusCode.UNAVAILABLE
    assert stopped["code"] == 0, run.cli.tail()
    assert stopped["actor_code"] == 0, stopped["actor_log"]
    assert stopped["actor"]["stopped_by"].startswith("run:")
    assert summary["stop_reason"] == "stop requested over gRPC"
    assert summary["checkpoint"] and summary["checkpoint"] != path
    assert consistent_cut(summary["checkpoint"]) == summary["frames"] >= frames
    assert summary["optim_steps"] > 0 and summary["model_version"] == summary["optim_steps"]
    # The literal secrets reached no file of the run directory (config, metrics, summary,
    # checkpoints) and no line of its log.
    files = [p for p in run.run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "config.yaml" for p in files) and any(p.suffix == ".pt" for p in files)
    for secret in (TOKEN, ACTOR_TOKEN):
        assert not [p for p in files if secret.encode() in p.read_bytes()], secret
        assert not [line for line in run.log if secret in line], secret


def test_resume_accepts_the_grpc_checkpoint_and_a_failed_final_one_exits_1(stopped, tmp_path):
    frames = consistent_cut(stopped["checkpoint"])
    run = Served(tmp_path / "resumed", "--resume", stopped["checkpoint"])
    try:
        status = run.client.status()
        assert status.frames == frames
        assert sum(s.size for s in status.replay) == frames
        assert any("resumed from" in line for line in run.log)
        rotation = run.run_dir / "checkpoints"
        with diskfaults.refusing(rotation):  # the final checkpoint cannot be written
            run.client.stop(wait=False)
            code, summary = run.cli.finish()
        assert code == 1 and summary == {}
        message = next(line for line in run.log if line.startswith("relayrl: checkpoint under"))
        assert str(rotation) in message and "not written" in message
        assert not list(rotation.iterdir())  # no staging directory left
    finally:
        run.close()
