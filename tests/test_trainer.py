"""The Python API: ``from services import Trainer`` on the session's Ray, and its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from collector.receipts import RolloutReceipt
from services import ConfigError, Policy, RunConfig, Trainer
from services.run.events import CheckpointSaved, Progress, RunStarted, TrainEnded
from tests.conftest import ROOT

TINY = {
    "algorithm": "dqn",
    "collector": {"num_collectors": 1, "envs_per_collector": 4, "rollout_frames": 128},
    "replay": {"num_shards": 1},
    "controller": {"total_frames": 1500, "init_random_frames": 500, "log_interval_s": 0.2},
    "metrics": {"enabled": False},
}


def test_trainer_trains_a_dict_config_twice_with_typed_callbacks(ray_cluster, tmp_path):
    trainer = Trainer(TINY, {"seed": 3, "run.storage": str(tmp_path)})
    seen = []
    for event in ("setup", "rollout", "progress", "checkpoint", "train_end"):
        trainer.register(event, seen.append)
    first = trainer.train()
    assert ray.is_initialized()  # the caller's Ray (here the session's) is left running
    assert first["seed"] == 3 and first["frames"] >= 1500
    assert isinstance(seen[0], RunStarted) and seen[0].run_id == first["run_id"]
    progress = [p for p in seen if isinstance(p, Progress)]
    assert progress and {p.run_id for p in progress} == {first["run_id"]}
    assert [p.frames for p in progress] == sorted(p.frames for p in progress)
    assert progress[-1].total_frames == 1500 and "frames" in progress[-1].snapshot
    rollouts = [r for r in seen if isinstance(r, RolloutReceipt)]
    assert sum(r.frames for r in rollouts) == first["frames"]  # every counted rollout, once
    ended = [e for e in seen if isinstance(e, TrainEnded)]
    assert len(ended) == 1 and ended[0].frames == first["frames"]
    saved = [c for c in seen if isinstance(c, CheckpointSaved)]
    assert saved[-1].path == Path(first["checkpoint"]) and saved[-1].path.is_dir()
    assert trainer.run_dir == Path(first["run_dir"]) and trainer.run_dir.parent == tmp_path

    seen.clear()
    second = trainer.train()  # a second run of the same config in the same process
    assert second["run_id"] != first["run_id"] and second["frames"] >= 1500
    assert {p.run_id for p in seen if isinstance(p, Progress)} == {second["run_id"]}
    policy = trainer.policy()
    assert isinstance(policy, Policy) and policy.checkpoint == Path(second["checkpoint"])
    assert policy.act([0.0, 0.0, 0.0, 0.0]) in (0, 1)


def test_configs_are_taken_as_a_file_a_dict_or_a_run_config():
    from_file = Trainer(ROOT / "deploy" / "configs" / "cartpole_ppo.yaml", {"seed": 2}).config
    assert from_file.algorithm == "ppo" and from_file.seed == 2
    assert Trainer(RunConfig(seed=5)).config.seed == 5
    assert Trainer({"algorithm": "sac"}).config.collector.env_id == "Pendulum-v1"  # its recipe


def test_invalid_input_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="learner.world_size"):
        Trainer(TINY, {"learner.world_size": 0})
    with pytest.raises(ConfigError, match="learner.no_such_key: unknown key"):
        Trainer({"learner": {"no_such_key": 1}})
    with pytest.raises(ValueError, match="event: must be one of"):
        Trainer(TINY).register("progres", print)
    trainer = Trainer(TINY, {"collector.env_id": "NoSuchEnv-v9", "run.storage": str(tmp_path)})
    with pytest.raises(ConfigError, match="collector.env_id"):
        trainer.train()
    assert not any(tmp_path.iterdir())  # no run directory was made
    with pytest.raises(RuntimeError, match="train"):
        trainer.policy()
