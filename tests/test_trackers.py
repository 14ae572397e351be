"""Experiment trackers: a real CartPole run logged to an MLflow file store and W&B offline."""

from __future__ import annotations

import json
import logging
import socket
import struct
from pathlib import Path

import pytest

from services import ConfigError, Trainer
from services.config import load_config
from services.config.trackers import check_tracker_extras
from services.observe.trackers import start_trackers

mlflow = pytest.importorskip("mlflow")
pytest.importorskip("wandb")

TINY = {
    "algorithm": "dqn",
    "collector": {"num_collectors": 1, "envs_per_collector": 4, "rollout_frames": 128},
    "replay": {"num_shards": 1},
    "controller": {"total_frames": 2000, "init_random_frames": 500, "log_interval_s": 0.2},
    "metrics": {"enabled": False, "trackers": ["mlflow", "wandb", "tensorboard"]},
}


def wandb_records(run_dir: Path) -> list:
    """Every record of the run's offline ``.wandb`` file (W&B's LevelDB-style log)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, records, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 2):  # full, first
            pending = chunk
        elif kind in (3, 4):  # middle, last
            pending += chunk
        if kind in (1, 4) and pending:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_a_run_is_logged_to_mlflow_and_wandb_with_frames_as_steps(
    ray_cluster, tmp_path, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    summary = Trainer(TINY, {"seed": 1, "run.storage": str(tmp_path)}).train()
    run_dir = Path(summary["run_dir"])
    assert summary["mlflow_tracking_uri"] == (tmp_path / "mlruns").as_uri()
    assert (
        json.loads((run_dir / "summary.json").read_text())["mlflow_run_id"]
        == (summary["mlflow_run_id"])
    )
    assert "tracker_errors" not in summary
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    progress = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    frames = [p["frames"] for p in progress if "frames" in p]

    # MLflow: the run by its name, the config as params, metrics stepped by frames, files.
    mlflow.set_tracking_uri(summary["mlflow_tracking_uri"])
    runs = mlflow.search_runs(
        experiment_names=["relayrl"], filter_string=f"attributes.run_name = '{summary['run_id']}'"
    )
    assert len(runs) == 1 and runs.iloc[0]["run_id"] == summary["mlflow_run_id"]
    row = runs.iloc[0]
    assert row["status"] == "FINISHED"
    assert row["params.learner.lr"] == "0.001" and row["params.seed"] == "1"
    assert row["params.collector.env_id"] == "CartPole-v1"
    client = mlflow.tracking.MlflowClient(summary["mlflow_tracking_uri"])
    history = client.get_metric_history(summary["mlflow_run_id"], "optim_steps")
    assert [m.step for m in history] == frames and frames[-1] >= 2000
    assert [m.value for m in history] == [p["optim_steps"] for p in progress if "frames" in p]
    artifacts = {a.path for a in client.list_artifacts(summary["mlflow_run_id"])}
    assert {"summary.json", "config.yaml"} <= artifacts

    # W&B offline: under <run dir>/wandb/, the same params, history and files.
    records = wandb_records(run_dir)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_id == summary["run_id"] and run.display_name == summary["run_id"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["learner.lr"] == "0.001" and config["collector.env_id"] == "CartPole-v1"
    history_rows = [
        {item.key or "/".join(item.nested_key): item.value_json for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    # W&B keeps one history row per step: the last line logged at each frame count.
    by_frames = {p["frames"]: p["optim_steps"] for p in progress if "frames" in p}
    assert [int(h["_step"]) for h in history_rows] == sorted(by_frames)
    assert [float(h["optim_steps"]) for h in history_rows] == [
        by_frames[f] for f in sorted(by_frames)
    ]
    kinds = [(r.WhichOneof("record_type"), r) for r in records]
    files = {f.path for kind, r in kinds if kind == "files" for f in r.files.files}
    assert {"summary.json", "config.yaml"} <= files
    assert summary["wandb_run_id"] == summary["run_id"]


def test_a_tracker_whose_server_is_down_is_logged_and_never_raises(tmp_path, caplog, monkeypatch):
    with socket.socket() as sock:  # a port the OS gave out and nothing listens on now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    config = load_config(
        overrides=[
            "metrics.trackers=mlflow",
            f"metrics.mlflow.tracking_uri=http://127.0.0.1:{port}",
        ]
    )
    caplog.set_level(logging.WARNING)
    trackers = start_trackers(config, run_id="down-1", run_dir=tmp_path)
    assert trackers is not None
    trackers.progress(None, {"frames": 128, "episode_return_mean": 10.0})
    fields = trackers.fields(timeout=60)
    trackers.close([], timeout=60)
    assert fields["mlflow_run_id"] is None and "mlflow" in fields["tracker_errors"]
    assert any("tracker mlflow: could not start" in r.getMessage() for r in caplog.records)


def test_trackers_are_set_from_the_command_line_and_refused_when_unknown_or_missing(monkeypatch):
    config = load_config(overrides=["metrics.trackers=mlflow,tensorboard"])
    assert config.metrics.trackers == ("mlflow", "tensorboard")
    with pytest.raises(ConfigError, match="metrics.trackers: must name"):
        load_config(overrides=["metrics.trackers=mlflow,neptune"])
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"relayrl\[wandb\]"):
        check_tracker_extras(load_config(overrides=["metrics.trackers=wandb"]).metrics)
