"""The learner group on a local Ray: rendezvous, sampling, generations, failure, state."""

import dataclasses
import io
import socket

import numpy as np
import pytest
import ray
import torch

from collector.networks.q_mlp import ModelSpec
from learner.config import LearnerConfig
from learner.gpu.check import arrays as random_arrays
from learner.ranks.group import LearnerGroup, PendingRound
from learner.receipts import ProtocolError, StaleGenerationError
from learner.weights import WeightSchemaError, spec_schema
from replay.shard import remote_shard

SPEC = ModelSpec(4, 2, (16, 16))


@pytest.fixture(scope="module")
def shards(ray_cluster):
    handles = [remote_shard("lg", i, 1000, seed=i) for i in range(2)]
    ray.get([s.write.remote(random_arrays(300, i), "writer", 0) for i, s in enumerate(handles)])
    yield handles
    for handle in handles:
        ray.kill(handle)


def split_per_rank(batches, world_size):
    size = len(batches[0]["reward"]) // world_size
    return [
        [{k: v[r * size : (r + 1) * size] for k, v in b.items()} for b in batches]
        for r in range(world_size)
    ]


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=0, rtol=0)


def test_rendezvous_survives_a_taken_port_and_ranks_sample_with_prefetch(shards):
    from learner.core import LearnerCore

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = LearnerConfig(
            world_size=2, global_batch_size=32, rendezvous_port=port, grad_accumulation=2
        )
        group = LearnerGroup("taken", config, SPEC, shards, seed=0)
        try:
            assert group.port not in (0, port)
            ranks = group.describe()
            assert [(r["rank"], r["backend"], r["ddp"]) for r in ranks] == [
                (0, "gloo", True),
                (1, "gloo", True),
            ]
            # Rounds of 2, 3 and 1 steps: prefetch exact, topped up, then subsampled.
            for steps, version in ((2, 2), (3, 5), (1, 6)):
                receipt = group.step(steps)
                assert receipt.samples == 16 * steps
                assert receipt.model_version == version == receipt.published.version
                assert receipt.metrics["loss_q"] > 0 and receipt.metrics["grad_norm"] > 0
                assert receipt.metrics["nonfinite_skipped"] == 0  # the accumulating stepper
            assert_same(group.parameters(0), group.parameters(1))
            # DDP with accumulation (no_sync) on half batches == one process on full batches.
            state = group.state_dicts()[0]
            batches = [random_arrays(32, 50 + s) for s in range(2)]
            group.step_on(split_per_rank(batches, 2))
            distributed = group.parameters(1)
        finally:
            group.shutdown()
        single = LearnerCore(SPEC, dataclasses.replace(config, world_size=1))
        single.load_state_dict(state)
        single.train([single.to_batch(b) for b in batches])
        for name, value in single.weights().items():
            torch.testing.assert_close(distributed[name], value, atol=1e-5, rtol=0)


def test_state_round_trip_and_stale_generations_are_refused(ray_cluster, shards):
    config = LearnerConfig(world_size=2, global_batch_size=32, lr=1e-2, target_update_interval=2)
    rng_batches = [random_arrays(32, 100 + s) for s in range(5)]
    first = LearnerGroup("rt", config, SPEC, shards, seed=1, generation=0)
    try:
        first.step_on(split_per_rank(rng_batches[:3], 2))
        buffer = io.BytesIO()
        torch.save(first.state_dicts(), buffer)
        saved = first.parameters()
        stale = first.publish()
        first.step_on(split_per_rank(rng_batches[3:], 2))
        expected = first.parameters(1)
    finally:
        first.shutdown()

    buffer.seek(0)
    states = torch.load(buffer, weights_only=True)
    second = LearnerGroup("rt", config, SPEC, shards, seed=2, generation=1)
    try:
        assert not torch.equal(second.parameters()["0.weight"], saved["0.weight"])
        assert second.load_state_dicts(states) == 3
        assert_same(second.parameters(1), saved)
        restored = second.state_dicts()
        for rank in range(2):
            optimizer = restored[rank]["stepper"]["optimizer"]["state"]
            for index, slots in states[rank]["stepper"]["optimizer"]["state"].items():
                assert_same(optimizer[index], slots)
        # The old generation's publication, round and rank commands are refused.
        with pytest.raises(StaleGenerationError, match="generation 0 refused"):
            second.verify_publication(stale)
        old_round = PendingRound(4, 1, 4, (), generation=0)
        with pytest.raises(StaleGenerationError, match="round from generation 0"):
            second.finish_round(old_round)
        with pytest.raises(StaleGenerationError):
            ray.get(second.ranks[0].publish.remote(0)[0])
        published = second.publish()
        assert (published.generation, published.version) == (1, 3)
        assert published.key > stale.key
        second.step_on(split_per_rank(rng_batches[3:], 2))
        assert_same(second.parameters(0), expected)
        assert_same(second.parameters(1), expected)
    finally:
        second.shutdown()


def test_disagreeing_receipts_fail_the_generation(ray_cluster, shards):
    config = LearnerConfig(global_batch_size=16)
    wrong_schema = spec_schema(ModelSpec(4, 2, (16, 8)))
    group = LearnerGroup("fail", config, SPEC, shards, seed=3, policy_schema=wrong_schema)
    try:
        with pytest.raises(WeightSchemaError, match=r"2\.weight: learner \(16, 16\)"):
            group.publish()
        states = group.state_dicts()
        states[0]["meta"]["world_size"] = 2
        with pytest.raises(ValueError, match="cannot be restored into world_size 1"):
            group.load_state_dicts([states[0], states[0]])

        pending = group.start_round(2, publish=False)
        for command in (lambda: group.start_round(1), group.publish, group.state_dicts):
            with pytest.raises(ProtocolError, match="still in flight"):
                command()
        assert group.failed is None
        tampered = dataclasses.replace(pending, expected_version=pending.expected_version + 1)
        with pytest.raises(ProtocolError, match="model version 2, expected 3"):
            group.finish_round(tampered)
        assert group.failed
        for command in (lambda: group.start_round(1), group.publish, group.state_dicts):
            with pytest.raises(ProtocolError, match="generation 0 has failed"):
                command()
    finally:
        group.shutdown()


def test_store_uses_a_free_requested_port_and_falls_back_from_a_taken_one(free_port):
    import psutil

    from learner.ranks.rendezvous import open_store

    store = open_store("127.0.0.1", free_port, 1, timeout_s=5)
    assert store.port == free_port
    bound = {
        c.laddr.ip for c in psutil.Process().net_connections("tcp") if c.laddr.port == free_port
    }
    assert bound == {"127.0.0.1"}  # loopback alone, not torch's every-interface default
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        fallback = open_store("127.0.0.1", port, 1, timeout_s=5, attempts=2)
        assert fallback.port not in (0, port)
        with pytest.raises(RuntimeError, match="in 1 attempts"):
            open_store("127.0.0.1", port, 1, timeout_s=5, attempts=1)
    del store, fallback


def actor_critic_factory():
    """A factory whose loss class is defined here, so Ray ships it to the ranks by value."""
    from tensordict import TensorDict
    from torch import nn
    from torch.nn import functional as F

    class ActorCritic(nn.Module):
        def __init__(self, actor, config):
            super().__init__()
            self.actor = actor
            self.critic = nn.Linear(5, 1)

        def actor_parameters(self):
            return self.actor.parameters()

        def critic_parameters(self):
            return self.critic.parameters()

        def loss_critic(self, batch):
            inputs = torch.cat([batch["observation"], batch["action_value"]], dim=-1)
            q = self.critic(inputs).squeeze(-1)
            return TensorDict({"loss_critic": F.mse_loss(q, batch["reward"])}, [])

        def loss_actor(self, batch):
            action = self.actor(batch["observation"])
            q = self.critic(torch.cat([batch["observation"], action], dim=-1))
            return TensorDict({"loss_actor": -q.mean()}, [])

    return ActorCritic


def test_user_loss_and_delayed_stepper_under_ddp_match_one_process(ray_cluster, shards):
    from learner.core import LearnerCore

    spec = ModelSpec(4, 1, (8,))
    loss_cls = actor_critic_factory()
    config = LearnerConfig(
        world_size=2,
        global_batch_size=32,
        stepper="delayed_policy",
        stepper_options={"policy_delay": 2},
        lr=1e-2,
    )
    batches = [
        dict(random_arrays(32, s), action_value=np.ones((32, 1), np.float32)) for s in (1, 2, 3)
    ]
    group = LearnerGroup("ac", config, spec, shards, seed=5, loss_factory=loss_cls)
    try:
        receipt = group.step_on(split_per_rank(batches, 2))
        distributed = group.parameters(1)
    finally:
        group.shutdown()
    assert receipt.metrics["actor_updated"] == pytest.approx(2 / 3)
    assert {"loss_actor", "loss_critic", "critic_grad_norm"} <= receipt.metrics.keys()
    torch.manual_seed(5)
    single = LearnerCore(spec, dataclasses.replace(config, world_size=1), loss_factory=loss_cls)
    initial = single.weights()
    single.train([single.to_batch(b) for b in batches])
    for name, value in single.weights().items():
        torch.testing.assert_close(distributed[name], value, atol=1e-5, rtol=0)
        assert not torch.equal(value, initial[name])
