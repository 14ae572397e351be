"""The asynchronous loop's pure parts: trajectory chunks, the FIFO queue, the V-trace losses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collector.chunks import ChunkWorker
from collector.envs.vector import make_vector_env
from collector.networks.actor_critic import ActorCriticSpec
from learner.losses.appo import APPOLoss
from learner.losses.impala import IMPALALoss
from replay.sampling.samplers import FifoSampler
from replay.table import ReplayTable

SPEC = ActorCriticSpec(4, 2, hidden_sizes=(16,))


def worker(num_envs: int = 3, max_steps: int = 7) -> ChunkWorker:
    torch.manual_seed(0)
    envs = make_vector_env("CartPole-v1", num_envs, env_kwargs={"max_episode_steps": max_steps})
    policy = SPEC.make_policy(SPEC.build(), np.random.SeedSequence(0))
    return ChunkWorker(envs, policy, list(range(num_envs)))


def test_chunks_hold_next_states_finals_and_mask_the_auto_reset_steps():
    w = worker(max_steps=7)
    first = w.rollout(20, {}, policy_version=5)
    second = w.rollout(20, {}, policy_version=6)
    c = first.transitions
    assert c["observation"].shape == (3, 21, 4) and c["action"].shape == (3, 20)
    assert c["policy_version"].tolist() == [5, 5, 5]
    done = c["terminated"] | c["truncated"]
    assert done[:, :7].any(axis=1).all()  # time limit 7: every env ended its first episode
    for env in range(3):
        for t in np.flatnonzero(done[env]):
            if t + 1 < 20:
                assert not c["valid"][env, t + 1]  # the auto-reset step is not a transition
                # the final state stays the next state of the ending step (no reset in place)
                assert not np.array_equal(
                    c["observation"][env, t + 1], c["observation"][env, t + 2]
                )
    assert first.frames == int(c["valid"].sum()) < 60
    # Chunks continue: the first state of a rollout is the last next state of the one before.
    np.testing.assert_array_equal(second.transitions["observation"][:, 0], c["observation"][:, -1])
    assert sum(first.episode_lengths) + sum(second.episode_lengths) <= first.frames + second.frames


def test_a_fifo_queue_hands_each_item_out_once_and_comes_back_short():
    table = ReplayTable(capacity=16, sampler="fifo", fifo_queue=True, seed=0)
    table.write({"x": np.arange(5, dtype=np.float32)}, "w", 0)
    assert table.sample(3)["x"].tolist() == [0, 1, 2]
    assert table.info()["remaining"] == 2
    assert table.sample(4)["x"].tolist() == [3, 4]  # short: only two were never handed out
    table.write({"x": np.arange(5, 8, dtype=np.float32)}, "w", 1)
    assert table.sample(8)["x"].tolist() == [5, 6, 7]
    sampler = table.sampler
    assert isinstance(sampler, FifoSampler)
    arrays, meta = sampler.state(len(table))
    restored = FifoSampler(table.insertion_ids)
    restored.restore(arrays, meta)
    assert restored.queue and restored.taken_id == 7 and restored.remaining == 0


def test_a_fifo_without_the_queue_still_serves_passes():
    table = ReplayTable(capacity=16, sampler="fifo", seed=0)
    table.write({"x": np.arange(3, dtype=np.float32)}, "w", 0)
    assert table.sample(5)["x"].tolist() == [0, 1, 2, 0, 1]


def chunk_batch(seed: int = 0) -> TensorDict:
    w = worker(num_envs=4, max_steps=9)
    batch = w.rollout(16, {}, policy_version=0).transitions
    return TensorDict({k: torch.as_tensor(v) for k, v in batch.items()}, batch_size=[4])


@pytest.mark.parametrize("loss_cls", [IMPALALoss, APPOLoss])
def test_masked_steps_do_not_reach_the_loss(loss_cls):
    batch = chunk_batch()
    assert not batch["valid"].all()
    torch.manual_seed(1)
    loss = loss_cls(SPEC.build())
    out = loss(batch)
    changed = batch.clone()
    invalid = ~changed["valid"]
    changed["action"][invalid] = 1 - changed["action"][invalid]
    changed["log_prob"][invalid] = -5.0
    again = loss(changed)
    for key in ("loss_objective", "loss_critic", "loss_entropy"):
        torch.testing.assert_close(out[key], again[key])


def test_appo_starts_on_policy_and_its_old_policy_follows_on_update():
    batch = chunk_batch()
    torch.manual_seed(1)
    network = SPEC.build()
    loss = APPOLoss(network)
    # The collector's network acted: with pi = pi_old = mu every ratio is 1.
    batch["log_prob"] = _log_prob(network, batch)
    out = loss(batch)
    assert float(out["clip_fraction"]) == 0.0 and abs(float(out["approx_kl"])) < 1e-6
    with torch.no_grad():
        for p in network.parameters():
            p.add_(0.1)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(network.parameters(), loss.old_actor_critic.parameters(), strict=True)
    )
    loss.update_target(1.0)
    for a, b in zip(network.parameters(), loss.old_actor_critic.parameters(), strict=True):
        assert torch.equal(a, b)


def _log_prob(network, batch: TensorDict) -> torch.Tensor:
    from learner.losses.chunks import evaluate_chunks

    with torch.no_grad():
        return evaluate_chunks(network, batch)[0]


def test_impala_on_policy_ratios_are_one_and_its_gradient_moves_the_policy():
    batch = chunk_batch()
    torch.manual_seed(1)
    network = SPEC.build()
    batch["log_prob"] = _log_prob(network, batch)
    out = IMPALALoss(network)(batch)
    assert abs(float(out["rho_mean"]) - 1.0) < 1e-5 and float(out["rho_clipped"]) == 0.0
    (out["loss_objective"] + out["loss_critic"]).backward()
    grads = [p.grad for p in network.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)


@pytest.mark.parametrize("loss_cls", [IMPALALoss, APPOLoss])
def test_gaussian_chunks_train(loss_cls):
    spec = ActorCriticSpec(3, 1, hidden_sizes=(16,), distribution="gaussian")
    torch.manual_seed(0)
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    envs = make_vector_env("Pendulum-v1", 2, env_kwargs={"max_episode_steps": 10})
    chunks = ChunkWorker(envs, policy, [0, 1]).rollout(12, {}, policy_version=0).transitions
    assert chunks["action"].shape == (2, 12, 1) and chunks["action"].dtype == np.float32
    batch = TensorDict({k: torch.as_tensor(v) for k, v in chunks.items()}, batch_size=[2])
    out = loss_cls(network)(batch)
    (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
    assert network.log_std.grad is not None and torch.isfinite(network.log_std.grad).all()
    assert abs(float(out["rho_mean"]) - 1.0) < 1e-4  # the acting network is the learner's


def test_normalized_advantages_standardize_only_the_valid_steps():
    from learner.losses.chunks import normalized

    values = torch.tensor([[1.0, 3.0, 100.0], [5.0, 7.0, -50.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    out = normalized(values, mask)
    valid = out[mask > 0]
    assert abs(float(valid.mean())) < 1e-6 and abs(float(valid.std(unbiased=False)) - 1) < 1e-5
    assert out[0, 2] == 100.0 and out[1, 2] == -50.0  # masked steps untouched


@pytest.mark.parametrize("loss_cls", [IMPALALoss, APPOLoss])
def test_normalize_advantage_changes_only_the_policy_term(loss_cls):
    batch = chunk_batch()
    torch.manual_seed(1)
    network = SPEC.build()
    plain = loss_cls(network)(batch)
    scaled = loss_cls(network, normalize_advantage=True)(batch)
    assert not torch.allclose(plain["loss_objective"], scaled["loss_objective"])
    torch.testing.assert_close(plain["loss_critic"], scaled["loss_critic"])
