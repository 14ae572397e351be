"""Run identity, per-run metrics labels and sweep helpers: pure, no Ray."""

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.config import ConfigError, load_config
from services.driver.placement import demand_text, run_demand
from services.driver.runid import JOB_CONFIG_ENV, new_run_id
from services.driver.stats import RunCounters
from services.observe.metrics import METRICS, MetricsExporter
from services.observe.sweep_report import point_rows, run_rows
from services.run.rundir import resolve_run_dir
from services.sweep import grid_points, parse_seeds, split_values

NOW = 1_790_000_000.0


def test_run_ids_started_in_the_same_second_differ(monkeypatch):
    monkeypatch.delenv(JOB_CONFIG_ENV, raising=False)
    ids = {new_run_id("cartpole", now=NOW) for _ in range(50)}
    assert len(ids) == 50
    name, date, clock, token = next(iter(ids)).split("-")
    assert name == "cartpole" and len(date) == 8 and len(clock) == 6 and len(token) == 6


def test_run_id_token_comes_from_the_ray_job(monkeypatch):
    metadata = {"metadata": {"job_submission_id": "raysubmit_Ab12Cd34Ef56Gh78"}}
    monkeypatch.setenv(JOB_CONFIG_ENV, json.dumps(metadata))
    assert new_run_id("r", now=NOW).endswith("-56gh78")  # the submission id's tail
    monkeypatch.setenv(JOB_CONFIG_ENV, "not json")
    assert len(new_run_id("r", now=NOW).split("-")[-1]) == 6  # random fallback


def test_run_dirs_of_one_second_are_distinct_and_a_taken_id_is_redrawn(tmp_path, monkeypatch):
    monkeypatch.delenv(JOB_CONFIG_ENV, raising=False)
    first_id, first = resolve_run_dir("r", None, tmp_path, run_id=new_run_id("r", now=NOW))
    second_id, second = resolve_run_dir("r", None, tmp_path, run_id=new_run_id("r", now=NOW))
    assert first != second and first_id != second_id
    assert first == tmp_path / first_id and first.is_dir() and first.is_absolute()
    third_id, third = resolve_run_dir("r", None, tmp_path, run_id=first_id)  # id already taken
    assert third_id != first_id and third.is_dir() and third.name == third_id
    explicit = tmp_path / "explicit"
    assert resolve_run_dir("r", str(explicit), tmp_path, run_id="x")[1] == explicit


def scrape(url: str) -> list:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


class _Controller:
    counters = RunCounters(collected_frames=100)


def test_every_series_carries_the_run_label_and_endpoints_differ(tmp_path):
    snapshot = {
        "epsilon": 0.5,
        "frames_per_s": 1.0,
        "updates_per_s": 1.0,
        "episode_return_mean": 20.0,
        "episode_length_mean": 20.0,
        "replay": [{"shard_id": 0, "size": 5, "write_count": 5, "sample_count": 2}],
    }
    exporters = [MetricsExporter(run_id=f"run-{i}", sd_dir=tmp_path) for i in range(2)]
    try:
        assert exporters[0].port != exporters[1].port
        for exporter in exporters:
            exporter.on_progress(_Controller(), snapshot)
            exporter.on_checkpoint(_Controller(), None, 0.5)
            target = json.loads((tmp_path / f"{exporter.run_id}.json").read_text())
            assert target[0]["targets"] == [f"127.0.0.1:{exporter.port}"]
            samples = scrape(exporter.url)
            relayrl = [s for s in samples if s.name.startswith("relayrl_")]
            assert relayrl and all(s.labels.get("run") == exporter.run_id for s in relayrl)
            names = {s.name for s in relayrl}
            assert "relayrl_replay_size" in names and "relayrl_episode_return" in names
    finally:
        for exporter in exporters:
            exporter.close()
    assert not list(tmp_path.glob("*.json"))  # targets removed with their endpoints
    assert all(name for name, *_ in METRICS)


def test_demand_names_every_role_and_the_total():
    config = load_config(overrides=["collector.num_collectors=3", "learner.world_size=2"])
    assert run_demand(config) == {"CPU": 3 * 0.5 + 2 * 0.25 + 2 * 1}
    text = demand_text(config)
    assert "3 collectors x {CPU: 0.5}" in text and "total {CPU: 4}" in text


def test_sweep_arguments():
    assert split_values("a,[1, 2],b") == ["a", "[1, 2]", "b"]
    assert parse_seeds("0,1,2") == [0, 1, 2]
    for bad in ("0,x", "1,1", ""):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)
    assert grid_points([]) == [{}]
    points = grid_points(["learner.lr=1e-3,5e-4", "collector.n_step=1,3"])
    assert len(points) == 4 and {"learner.lr": "5e-4", "collector.n_step": "3"} in points
    with pytest.raises(ConfigError, match="--grid"):
        grid_points(["learner.lr"])


def test_point_rows_average_finished_runs_only():
    rows = [
        {"point": "p", "status": "succeeded", "frames": 10, "optim_steps": 1, "wall_s": 1.0}
        | {"episode_return_mean": 20.0, "frames_per_s": 5.0},
        {"point": "p", "status": "succeeded", "frames": 30, "optim_steps": 3, "wall_s": 3.0}
        | {"episode_return_mean": 40.0, "frames_per_s": 15.0},
        {"point": "p", "status": "failed", "frames": None, "optim_steps": None, "wall_s": None}
        | {"episode_return_mean": None, "frames_per_s": None},
    ]
    (agg,) = point_rows(rows)
    assert (agg["runs"], agg["succeeded"]) == (3, 2)
    assert agg["episode_return_mean_mean"] == 30.0 and agg["episode_return_mean_std"] == 10.0
    assert agg["frames_mean"] == 20.0


def test_run_rows_copy_summaries_and_add_frames_to_milestones():
    summaries = [
        {"frames": 100, "episode_return_mean": 480.0, "return_milestones": {"475": {"frames": 90}}},
        {"frames": 100, "episode_return_mean": 200.0, "return_milestones": {}},
    ]
    results = [
        {"run_id": f"r{i}", "seed": i, "point": "p", "status": "succeeded", "summary": s}
        for i, s in enumerate(summaries)
    ]
    rows = run_rows(results)
    assert [r["frames_to_475"] for r in rows] == [90, None]
    assert [r["episode_return_mean"] for r in rows] == [480.0, 200.0]
    (agg,) = point_rows(rows)
    assert agg["frames_to_475_mean"] == 90.0 and agg["episode_return_mean_mean"] == 340.0
