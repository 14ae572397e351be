"""End-to-end: a CLI run with no collectors, fed and controlled over gRPC by other processes."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.grpc.client import RelayClient
from tests.conftest import PYTHON, ROOT, cli_env
from tests.grpc_probe import transitions

TOKEN = "test-token"
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

pytestmark = pytest.mark.slow  # every test here starts a run of its own


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


class Run:
    """A ``python -m services.train`` subprocess whose gRPC address is read from its log."""

    def __init__(self, run_dir, *extra: str) -> None:
        self.stdout = open(run_dir.parent / f"{run_dir.name}.stdout", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            [PYTHON, "-m", "services.train", *RUN_ARGS, "--set", f"run.dir={run_dir}", *extra],
            cwd=ROOT,
            env=cli_env(),
            stdout=self.stdout,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: list[str] = []
        self.address: str | None = None
        self.found = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        assert self.found.wait(120), "".join(self.log[-20:])
        assert self.address, "".join(self.log[-20:])
        self.client = RelayClient(self.address, token=TOKEN)

    def _read(self) -> None:
        for line in self.process.stderr:
            self.log.append(line)
            match = ADDRESS.search(line)
            if match and self.address is None:
                self.address = match.group(1)
                self.found.set()
        self.found.set()

    def finish(self, timeout: float = 120) -> tuple[int, dict]:
        code = self.process.wait(timeout=timeout)
        self.reader.join(timeout=10)
        self.stdout.seek(0)
        lines = self.stdout.read().splitlines()
        return code, json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}

    def close(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.stdout.close()


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
def served(tmp_path_factory):
    """One run for the module; its tests go in file order and the last one stops it."""
    run = Run(tmp_path_factory.mktemp("grpc") / "run")
    try:
        run.client.wait_health("SERVING", timeout=120)
        yield {"run": run}
    finally:
        run.close()


def test_external_actor_feeds_a_run_without_collectors(served):
    run = served["run"]
    result = subprocess.run(
        [PYTHON, "-m", "services.external_actor", "--address", run.address, "--token", TOKEN,
         "--frames", "2000", "--batch-frames", "256"],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    actor = json.loads(result.stdout.splitlines()[-1])
    assert actor["frames"] >= 2000 and actor["batches"] >= 8
    assert actor["weight_fetches"] >= 1 and actor["weights_version"] >= 0
    status = run.client.status()
    assert status.state == "running"
    assert status.frames == status.external_frames == status.transitions == actor["frames"]
    sizes = [shard.size for shard in status.replay]
    assert sum(sizes) == actor["frames"] and min(sizes) > 0  # one writer fills every shard
    port = next(int(m.group(1)) for line in run.log if (m := METRICS.search(line)))
    assert scraped(port, "relayrl_frames_total", source="external") == actor["frames"]
    assert scraped(port, "relayrl_transitions_total", source="external") == actor["frames"]
    assert scraped(port, "relayrl_frames_total", source="collector") == 0


def test_inserts_are_stored_counted_and_retries_acknowledged(served):
    out = probe("insert", served["run"].address)
    assert out["items"] == [300, 2000] and out["counted"] == 2300
    assert out["writer_ids"] == ["external/probe-insert"] * 2
    assert out["frames_after"] - out["frames_before"] == 2300
    assert out["external_after"] == out["frames_after"]
    assert out["replay_after"] - out["replay_before"] == 2300
    assert out["total"] == out["frames_after"]
    assert out["retry_counted"] == 0 and out["retry_duplicate"] == [True, True]


def test_weights_newer_than_a_version_load_into_a_policy_that_acts(served):
    out = probe("weights", served["run"].address)
    assert out["generation"] == 0 and out["version"] >= 0
    assert "0.weight" in out["keys"]
    assert len(out["actions"]) == 5 and set(out["actions"]) <= {0, 1}
    assert out["not_newer_again"]


def test_bad_inputs_are_refused_and_nothing_is_stored(served):
    out = probe("bad", served["run"].address)
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
    for case in ("no_token", "wrong_token", "no_token_status", "wrong_token_status"):
        assert cases[case][0] == "UNAUTHENTICATED", (case, cases[case])
    assert cases["no_token_health"][0] == "SERVING"
    assert out["replay_between"] == out["replay_before"]
    assert out["frames_between"] == out["frames_before"]
    assert out["good_counted"] == 64
    assert out["replay_after_good"] == out["replay_before"] + 64


def consistent_cut(path: str) -> int:
    """Checks a checkpoint's counters against its replay files; returns its frames."""
    counters = json.loads((ROOT / path / "manifest.json").read_text())["counters"]
    tables = [json.loads(p.read_text()) for p in (ROOT / path).glob("replay-*/table.json")]
    assert len(tables) == counters["replay_shards"] == 2
    assert sum(t["write_count"] for t in tables) == counters["transitions"]
    assert counters["transitions"] == counters["collected_frames"] == counters["external_frames"]
    return counters["collected_frames"]


def test_checkpoint_and_stop_while_an_actor_inserts(served):
    run = served["run"]
    client = run.client
    actor = subprocess.Popen(
        [PYTHON, "-m", "services.external_actor", "--address", run.address, "--token", TOKEN,
         "--frames", "10000000", "--batch-frames", "128"],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for line in actor.stderr:  # the cut comes while the actor keeps inserting
            if "inserted" in line:
                break
        path = client.checkpoint()
        assert client.status().last_checkpoint == path
        served["checkpoint"] = path
        served["frames"] = consistent_cut(path)

        assert client.stop(wait=False) == ""
        assert client.health() == "NOT_SERVING"  # from the moment the stop is accepted
        with pytest.raises(grpc.RpcError) as refused:
            client.insert([transitions(8)])
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        code, summary = run.finish()
        out, err = actor.communicate(timeout=120)
    finally:
        actor.kill()
    assert code == 0, "".join(run.log[-30:])
    assert actor.returncode == 0, err[-3000:]
    assert json.loads(out.splitlines()[-1])["stopped_by"].startswith("run:")
    assert summary["stop_reason"] == "stop requested over gRPC"
    assert summary["checkpoint"] and summary["checkpoint"] != path
    assert consistent_cut(summary["checkpoint"]) == summary["frames"] >= served["frames"]
    assert summary["optim_steps"] > 0 and summary["model_version"] == summary["optim_steps"]


def test_resume_accepts_the_grpc_checkpoint(served, tmp_path):
    assert "checkpoint" in served, "needs the checkpoint of the previous test"
    run = Run(tmp_path / "resumed", "--resume", served["checkpoint"])
    try:
        run.client.wait_health("SERVING", timeout=120)
        status = run.client.status()
        assert status.frames == served["frames"]
        assert sum(s.size for s in status.replay) == served["frames"]
        final = run.client.stop(wait=True)
        assert final and (ROOT / final / "manifest.json").is_file()
        code, summary = run.finish()
        assert code == 0 and summary["checkpoint"] == final
        assert any("resumed from" in line for line in run.log)
    finally:
        run.close()
