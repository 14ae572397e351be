"""Prometheus scrapes during a real run, dashboard and docs/metrics.md agreement, plots."""

import json
import re
import signal
import subprocess
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from collector.receipts import RolloutReceipt
from services.config import load_config
from services.driver.stats import RunCounters
from services.observe.metrics import METRICS, MetricsExporter, exported_name, metrics_table
from tests.cli_run import CliRun, frames_of, is_progress
from tests.conftest import PYTHON, ROOT, cli_env

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def scrape(port: int) -> dict[str, list]:
    """Returns {sample name: [(labels, value), ...]} from one HTTP scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


FRAMES = "relayrl_frames_total"


def value(samples, name, **labels):
    matches = [
        v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items())
    ]
    assert matches, f"{name} {labels} not exported"
    return sum(matches)


def dashboard_series() -> set[str]:
    """Every sample name a panel of the shipped dashboard reads (``relayrl_..._bucket`` too)."""
    dashboard = json.loads((ROOT / "deploy/grafana/relayrl-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    return {name for expr in exprs for name in re.findall(r"relayrl_[a-z_]+", expr)}


def scrape_at_start(port: int, found: dict):
    """A log reader that scrapes once the run is prepared (its exporter attached), before its
    actors start."""

    def read(line: str) -> None:
        if "relayrl: Ray at" in line:
            found["ray"] = line
        if "relayrl: run id" in line and "scrape" not in found:
            found["scrape"] = scrape(port)
            found["run"] = line.split("run id ")[1].split()[0]

    return read


@pytest.mark.e2e
def test_scrapes_during_a_run_then_plot(tmp_path, free_port):
    run_dir = tmp_path / "run"
    args = ["--set", "controller.total_frames=16000", "--set", "controller.log_interval_s=0.5"]
    args += ["--set", f"metrics.port={free_port}"]
    scrapes = []
    at_start: dict = {}

    def due(line: str) -> bool:
        """A progress line with episodes; for the second scrape, well past the first's frames."""
        ready = is_progress(line) and "return -" not in line
        return ready and (not scrapes or frames_of(line) > value(scrapes[0], FRAMES) + 1000)

    with CliRun(*args, run_dir=run_dir, on_log=scrape_at_start(free_port, at_start)) as run:
        for _ in range(2):
            run.until(due, what="a progress line to scrape at")
            scrapes.append(scrape(free_port))
        run.send_signal(signal.SIGTERM)  # scraped twice: the rest of the budget adds nothing
        summary = run.summary(timeout=240)
    assert "dashboard off" in at_start["ray"]  # not started: a run does not use it
    # Every series a dashboard panel reads exists from the start, at 0 (the last checkpoint's
    # timestamp starts at the run's start), so no panel shows "No data".
    first_scrape = at_start["scrape"]
    for name in sorted(dashboard_series()):
        values = [v for labels, v in first_scrape.get(name, []) if labels["run"] == at_start["run"]]
        assert values, f"{name} missing at the start"
        if name == "relayrl_checkpoint_last_success_timestamp_seconds":
            assert values[0] > 1e9
        else:
            assert set(values) == {0.0}, (name, values)
    first, second = scrapes
    for name in ("relayrl_frames_total", "relayrl_transitions_total", "relayrl_episodes_total"):
        assert value(second, name) > value(first, name) > 0
    assert value(second, "relayrl_optim_steps_total") >= value(first, "relayrl_optim_steps_total")
    assert value(second, "relayrl_model_version") >= value(first, "relayrl_model_version")
    assert 0.0 <= value(second, "relayrl_exploration", param="epsilon") <= 1.0
    assert 8.0 <= value(second, "relayrl_episode_return") <= 500.0
    assert value(second, "relayrl_rollout_latency_seconds_count") > 0
    for shard in ("0", "1"):
        assert 0 < value(second, "relayrl_replay_size", shard=shard) <= 50_000
        assert value(second, "relayrl_replay_inserts_total", shard=shard) > 0
    assert summary["frames"] >= value(second, "relayrl_frames_total")

    result = subprocess.run(
        [PYTHON, "-m", "services.plot", str(run_dir)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    png = Path(result.stdout.strip())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def exporter_names() -> set[str]:
    return {exported_name(name) for name, *_ in METRICS}


def test_dashboard_queries_only_exported_metrics():
    assert len(dashboard_series()) >= 10
    queried = set()
    for token in dashboard_series():
        for suffix in HISTOGRAM_SUFFIXES:
            token = token.removesuffix(suffix)
        queried.add(token)
    assert queried <= exporter_names(), queried - exporter_names()
    for needed in (
        "frames_total",
        "update_to_data_ratio",
        "policy_lag",
        "episode_return",
        "loss",
        "replay_size",
        "collector_restarts_total",
    ):
        assert any(needed in q for q in queried), needed


def test_readme_metrics_table_matches_exporter():
    """The metrics reference (docs/metrics.md, linked from the README) is the exporter's table."""
    reference = (ROOT / "docs" / "metrics.md").read_text()
    assert metrics_table() in reference
    listed = set(re.findall(r"\| `(relayrl_[a-z_]+)` \|", reference))
    assert listed == exporter_names()
    assert "docs/metrics.md" in (ROOT / "README.md").read_text()


def test_prometheus_config_targets_the_driver():
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["relayrl-driver"]["metrics_path"] == "/metrics"
    assert jobs["ray"]["file_sd_configs"][0]["files"]


def test_tensorboard_logger_writes_scalars_against_frames(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from services.observe.tensorboard import TensorBoardLogger

    logger = TensorBoardLogger(tmp_path)
    for frames, ret in ((1000, 20.0), (2000, 35.5)):
        logger(
            None,
            {
                "frames": frames,
                "episode_return_mean": ret,
                "episode_length_mean": ret,
                "frames_per_s": 900.0,
                "updates_per_s": 450.0,
                "epsilon": 0.5,
                "update_to_data": 0.5,
                "learner": {"loss_q": 0.25, "grad_norm": float("nan")},
                "replay": [{"shard_id": 0, "size": frames}],
            },
        )
    logger.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"episode/return", "learner/loss_q", "replay/size/0"} <= set(scalars)
    assert "learner/grad_norm" not in scalars  # non-finite values are skipped
    returns = events.Scalars("episode/return")
    assert [(e.step, e.value) for e in returns] == [(1000, 20.0), (2000, 35.5)]


def rollout_receipt(collector_id: int) -> RolloutReceipt:
    return RolloutReceipt(collector_id, 1, 8, (), (), 0, 0, (), 0.01, 0.0)


@pytest.mark.parametrize("limit", [8, 4])
def test_rollout_series_are_per_collector_then_per_node_past_the_limit(limit):
    config = load_config(
        overrides=["collector.num_collectors=6", f"metrics.max_collector_series={limit}"]
    )
    run = SimpleNamespace(
        config=config,
        collectors=SimpleNamespace(nodes=["node-a"] * 3 + ["node-b"] * 3),
        counters=RunCounters(),
        register=lambda event, hook: None,
    )
    exporter = MetricsExporter(run_id="fleet")
    try:
        exporter.attach(run)
        exporter.on_setup(run)
        for index in range(6):
            exporter.on_rollout(run, rollout_receipt(index))
            exporter.on_rollout(run, rollout_receipt(index))
        exporter.on_progress(
            run,
            {
                "exploration": {"epsilons": [0.4, 0.1, 0.2, 0.3, 0.05, 0.01]},
                "frames_per_s": 1.0,
                "updates_per_s": 1.0,
                "episode_return_mean": float("nan"),
                "episode_length_mean": float("nan"),
            },
        )
        samples = scrape(exporter.port)
    finally:
        exporter.close()
    rollouts = {
        (labels["collector"], labels["node"]): v for labels, v in samples["relayrl_rollouts_total"]
    }
    exploration = {labels["param"]: v for labels, v in samples["relayrl_exploration"]}
    if limit >= 6:  # one series per collector, labelled with its node
        assert rollouts == {(str(i), "node-a" if i < 3 else "node-b"): 2.0 for i in range(6)}
        assert len(exploration) == 6 and exploration["epsilons[4]"] == 0.05
    else:  # past the limit: one series per node, its collectors summed
        assert rollouts == {("", "node-a"): 6.0, ("", "node-b"): 6.0}
        assert exploration == {"epsilons[min]": 0.01, "epsilons[max]": 0.4}
    assert value(samples, "relayrl_frames_total", source="collector") == 12 * 8
