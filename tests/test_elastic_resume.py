"""A checkpoint resumes at any size: collectors, envs, replay shards and learner ranks (real Ray).

One small prioritized DQN run writes a checkpoint at 2 collectors x 2 envs, 2 shards, 2 ranks;
each case resumes it with every size up (3, 3, 3) or every size down (1 x 4 envs, 1, 1), and
checks exactly what was saved: every replay item (all columns) with its priority mass, the driver's
counters, versions, and every new rank's parameters. The all-down case trains on and checks that
frames stay exact (every stored transition counted once). Re-sharding a replay and restoring
ranks at another world size are also tested alone, at the component level
(``tests/test_reshard.py``, ``tests/test_reshard_ray.py``, ``tests/test_learner_resize.py``).
Other algorithms resume at other sizes in their own tests: PPO (on-policy) in
``tests/test_algorithms_run.py``, SAC in ``tests/test_user_networks_run.py``, QMIX in
``tests/test_marl_run.py``.
"""

from __future__ import annotations

import pytest
import torch

from replay.persist.checkpoint import load_table
from replay.persist.items import item_rows, take_items
from services.checkpoints.store import read_json
from services.config import load_config
from services.driver.controller import Controller

BASE = [
    "collector.num_collectors=2",
    "collector.envs_per_collector=2",
    "collector.rollout_frames=64",
    "replay.num_shards=2",
    "replay.capacity=40000",
    "replay.sampler=prioritized",
    "learner.update_priorities=true",
    "controller.init_random_frames=300",
    "controller.utd_ratio=0.25",
    "learner.global_batch_size=48",
    "learner.world_size=2",
    "metrics.enabled=false",
]


def stored_rows(directory, num_shards: int) -> list[bytes]:
    return item_rows(take_items(load_table(directory / f"replay-{i}")) for i in range(num_shards))


@pytest.fixture(scope="module")
def dqn_checkpoint(ray_cluster, tmp_path_factory):
    """A 2x2 / 2 shards / 2 ranks DQN checkpoint, its counters, items and parameters."""
    root = tmp_path_factory.mktemp("elastic") / "ckpts"
    config = load_config(
        overrides=[
            "run.name=el-base",
            *BASE,
            "controller.total_frames=2000",
            f"checkpoint.dir={root}",
        ]
    )
    first = Controller(config)
    try:
        first.setup()
        first.train()
        params = first.learners.parameters()
    finally:
        first.shutdown()
    path = first.last_checkpoint
    driver = read_json(path / "driver.json")["counters"]
    return {"path": path, "counters": driver, "params": params, "rows": stored_rows(path, 2)}


# (collectors, envs, shards, world size), and whether to train on after the checks
SIZES = {
    "all-up": (3, 2, 3, 3, False),
    "all-down-other-envs": (1, 4, 1, 1, True),
}


@pytest.mark.parametrize("case", list(SIZES))
def test_dqn_checkpoint_resumes_at_other_sizes(dqn_checkpoint, tmp_path, case):
    collectors, envs, shards, world, train_on = SIZES[case]
    saved = dqn_checkpoint["counters"]
    config = load_config(
        overrides=[
            f"run.name=el-{case}",
            *BASE,
            f"collector.num_collectors={collectors}",
            f"collector.envs_per_collector={envs}",
            f"replay.num_shards={shards}",
            f"learner.world_size={world}",
            f"controller.total_frames={saved['collected_frames'] + 600}",
            f"checkpoint.dir={tmp_path / 'ckpts'}",
        ]
    )
    resumed = Controller(config, resume_from=dqn_checkpoint["path"])
    try:
        resumed.setup()
        c = resumed.counters
        assert c.collected_frames == saved["collected_frames"]
        assert c.transitions == saved["transitions"]
        assert c.optim_steps == c.model_version == saved["optim_steps"]
        assert c.generation == 1 and resumed.weights.key == (1, saved["optim_steps"])
        assert len(resumed.shards) == shards and len(resumed.collectors) == collectors
        for rank in range(world):  # every new rank holds the saved parameters, bit for bit
            restored = resumed.learners.parameters(rank)
            for name, value in dqn_checkpoint["params"].items():
                assert torch.equal(restored[name], value), (rank, name)
        redump = tmp_path / "redump"  # every item, with its priority, in exactly one new shard
        redump.mkdir()
        resumed.replay.dump(redump)
        assert stored_rows(redump, shards) == dqn_checkpoint["rows"]
        if train_on:
            resumed.train()
            c = resumed.counters
            assert c.collected_frames >= saved["collected_frames"] + 600
            assert c.model_version > saved["optim_steps"]
            writes = sum(s["write_count"] for s in resumed.replay.stats())
            assert writes == c.transitions  # each stored transition counted once
    finally:
        resumed.shutdown()
