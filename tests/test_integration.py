"""The whole service on a local Ray: accounting, pacing, versions, DDP equivalence."""

import numpy as np
import pytest
import ray
import torch

from collector.networks.q_mlp import ModelSpec
from learner.config import LearnerConfig
from learner.ranks.group import LearnerGroup
from replay.shard import remote_shard
from services.config import load_config
from services.driver.controller import Controller

PRIORITIZED = [
    "replay.sampler=prioritized",
    "learner.update_priorities=true",
    "collector.n_step=3",
]


HUBS = ["collector.aggregate_min_collectors=1"]  # rollouts through one hub per node


@pytest.mark.parametrize(
    ("world_size", "extra"),
    [(1, []), (2, []), (1, PRIORITIZED), (1, HUBS)],
    ids=["ws1", "ws2", "per-nstep", "hubs"],
)
def test_accounting_pacing_and_versions(ray_cluster, world_size, extra):
    config = load_config(
        overrides=[
            *extra,
            f"run.name=it-ws{world_size}-{len(extra)}",
            "seed=1",
            "controller.total_frames=4000",
            "controller.init_random_frames=500",
            "controller.utd_ratio=0.125",
            "collector.num_collectors=2",
            "collector.envs_per_collector=4",
            "collector.rollout_frames=128",
            "replay.num_shards=2",
            f"learner.world_size={world_size}",
            "learner.global_batch_size=32",
        ]
    )
    controller = Controller(config)
    receipts = []
    rounds = []
    controller.register("rollout", lambda _, r: receipts.append(r))
    controller.register("round", lambda _, r: rounds.append(r))
    try:
        controller.setup()
        controller.train()
        c = controller.counters
        shard_stats = controller.replay.stats()
        collector_versions = controller.collectors.policy_versions()
        hubs = len(controller.collectors.hubs)
    finally:
        controller.shutdown()

    total = config.controller.total_frames
    assert c.collected_frames == sum(r.frames for r in receipts)
    assert c.collected_frames == sum(s["write_count"] for s in shard_stats)
    assert all(s["write_count"] > 0 for s in shard_stats)  # both shards were written
    assert hubs == (1 if extra == HUBS else 0)  # one node: one hub
    if extra == PRIORITIZED:  # learners sent |td_error| priorities to the shards that served them
        assert all(s["priority_updates"] > 0 for s in shard_stats)
        assert all(s["sampler"] == "prioritized" for s in shard_stats)
    assert total <= c.collected_frames < total + 2 * config.collector.rollout_frames
    assert c.model_version == c.optim_steps == sum(r.optim_steps for r in rounds) > 0
    assert c.optim_steps == controller.loop.steps_target()
    assert [r.round_id for r in rounds] == list(range(1, len(rounds) + 1))
    assert c.published_version == c.model_version
    assert collector_versions == [(0, c.published_version)] * 2
    # Rollouts after the first publication carry weights that a learner produced.
    assert max(r.policy_version for r in receipts) > 0


def random_batches(steps, size, seed):
    rng = np.random.default_rng(seed)
    return [
        {
            "observation": rng.normal(size=(size, 4)).astype(np.float32),
            "action": rng.integers(0, 2, size=size),
            "reward": rng.normal(size=size).astype(np.float32),
            "next_observation": rng.normal(size=(size, 4)).astype(np.float32),
            "terminated": rng.random(size) < 0.1,
            "truncated": rng.random(size) < 0.05,
        }
        for _ in range(steps)
    ]


def test_two_ranks_on_half_batches_equal_one_rank_on_full_batch(ray_cluster):
    spec = ModelSpec(4, 2, (32, 32))
    shard = remote_shard("eq", 0, 16)
    batches = random_batches(steps=4, size=64, seed=3)
    params = {}
    for world_size in (1, 2):
        config = LearnerConfig(
            world_size=world_size, global_batch_size=64, target_update_interval=2, lr=1e-2
        )
        group = LearnerGroup(f"eq{world_size}", config, spec, [shard], seed=11)
        try:
            initial = group.parameters()
            per_rank = [
                [
                    {k: v[r * 64 // world_size : (r + 1) * 64 // world_size] for k, v in b.items()}
                    for b in batches
                ]
                for r in range(world_size)
            ]
            receipt = group.step_on(per_rank)
            assert receipt.model_version == 4
            params[world_size] = group.parameters(rank=world_size - 1)
        finally:
            group.shutdown()
    ray.kill(shard)
    moved = False
    for name, value in params[1].items():
        torch.testing.assert_close(params[2][name], value, atol=1e-5, rtol=0)
        moved |= not torch.equal(value, initial[name])
    assert moved
