"""APPO's minibatches of steps (``learner.vtrace.minibatch_unit: steps``), without Ray.

The step items of a pass carry V-trace's targets computed once over the whole chunk batch, so a
single minibatch of all of them must give the chunk loss exactly: same losses, same gradients.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collector.networks.actor_critic import ActorCriticSpec
from learner.losses.appo import APPOLoss
from learner.ranks.sampling import EpochPlan, Passes
from services.config import ConfigError, load_config
from tests.conftest import ROOT

B, T = 6, 10


def chunks(seed: int = 0) -> TensorDict:
    """CartPole-shaped chunks with terminations, mid-chunk truncations and auto-reset steps."""
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(B, T, generator=g) < 0.1
    truncated = (torch.rand(B, T, generator=g) < 0.1) & ~terminated
    ended = terminated | truncated
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[:, 1:] = ~ended[:, :-1]  # the step after an episode's end is an auto-reset step
    return TensorDict(
        {
            "observation": torch.randn(B, T + 1, 4, generator=g),
            "action": torch.randint(0, 2, (B, T), generator=g),
            "log_prob": -torch.rand(B, T, generator=g) - 0.2,  # a lagged behaviour policy
            "reward": torch.rand(B, T, generator=g),
            "terminated": terminated,
            "truncated": truncated,
            "valid": valid,
        },
        batch_size=[B],
    )


def make_loss(normalize: bool) -> APPOLoss:
    torch.manual_seed(0)
    loss = APPOLoss(
        ActorCriticSpec(4, 2, hidden_sizes=(16, 16)).build(),
        gamma=0.9,
        vtrace_lambda=0.95,
        clip_epsilon=0.2,
        normalize_advantage=normalize,
    )
    with torch.no_grad():  # pi_old differs from pi, so IMPACT's weight is not 1
        for p in loss.old_actor_critic.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return loss


def losses_and_grads(loss: APPOLoss, batch: TensorDict):
    loss.zero_grad()
    out = loss(batch)
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    total.backward()
    grads = [p.grad.clone() for p in loss.actor_critic.parameters()]
    values = {k: out[k].item() for k in ("loss_objective", "loss_critic", "loss_entropy")}
    return values, grads


@pytest.mark.parametrize("normalize", [False, True])
def test_one_minibatch_of_all_steps_equals_the_chunk_loss(normalize):
    loss, batch = make_loss(normalize), chunks()
    chunk_values, chunk_grads = losses_and_grads(loss, batch)
    items = loss.prepare_pass(batch, slice_size=4)  # two slices and a short one
    assert items.batch_size == torch.Size([B * T])
    step_values, step_grads = losses_and_grads(loss, items)
    for key, value in chunk_values.items():
        assert step_values[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    for a, b in zip(chunk_grads, step_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_step_items_are_the_chunks_steps_in_order():
    loss, batch = make_loss(True), chunks()
    items = loss.prepare_pass(batch)
    torch.testing.assert_close(items["observation"], batch["observation"][:, :T].reshape(-1, 4))
    assert torch.equal(items["action"], batch["action"].reshape(-1))
    assert torch.equal(items["valid"], batch["valid"].reshape(-1))
    valid = items["valid"]
    advantage = items["advantage"][valid]
    assert advantage.mean().abs() < 1e-5  # standardized over the batch's valid steps
    assert advantage.pow(2).mean().sqrt() == pytest.approx(1.0, rel=1e-4)


def test_passes_prepare_once_per_pass_and_draw_every_step_once():
    loss, batch = make_loss(False), chunks()
    calls = []

    def prepare(c):
        calls.append(len(c))
        items = loss.prepare_pass(c)
        items["tag"] = torch.arange(len(items))
        return items

    plan = EpochPlan(B, epochs=3, minibatches=4, max_policy_lag=8)
    passes = Passes(batch, plan, np.random.default_rng(0), prepare)
    assert len(passes) == 12 and passes.samples == 3 * B * T
    minibatches = list(passes)
    assert calls == [B, B, B] and len(minibatches) == 12
    for first in range(0, 12, 4):
        tags = torch.cat([m["tag"] for m in minibatches[first : first + 4]])
        assert sorted(tags.tolist()) == list(range(B * T))  # each step once per pass
        assert not torch.equal(tags, torch.arange(B * T))  # drawn across chunks


def test_recurrent_chunks_are_refused():
    loss, batch = make_loss(False), chunks()
    batch["recurrent_state"] = torch.zeros(B, 8)
    with pytest.raises(ValueError, match="minibatch_unit"):
        loss.prepare_pass(batch)


@pytest.mark.parametrize(
    ("config", "overrides", "field"),
    [
        ("cartpole_impala.yaml", [], "learner.vtrace.minibatch_unit"),
        ("cartpole_appo.yaml", ["learner.recurrent=lstm"], "learner.recurrent"),
        ("cartpole_appo.yaml", ["learner.loss=torchrl:ppo"], "learner.loss"),
        ("cartpole_appo.yaml", ["learner.vtrace.minibatch_unit=step"], "minibatch_unit"),
    ],
)
def test_steps_without_appos_loss_or_with_memory_is_refused(config, overrides, field):
    with pytest.raises(ConfigError, match=field):
        load_config(
            ROOT / "deploy" / "configs" / config,
            ["learner.vtrace.minibatch_unit=steps", *overrides],
        )


def test_a_pass_right_after_the_old_policy_refresh_evaluates_one_network():
    loss, batch = make_loss(False), chunks()
    loss.update_target(1.0)
    assert loss.old_is_current
    calls = []
    loss.old_actor_critic.register_forward_hook(lambda *_: calls.append(1))
    shared = loss.prepare_pass(batch)
    assert not calls  # pi_old's log-probs were the current network's
    loss.old_is_current = False
    both = loss.prepare_pass(batch.clone())  # another batch object: not the cached items
    assert calls
    for key in ("old_log_prob", "value_target", "advantage"):
        torch.testing.assert_close(shared[key], both[key])
    loss(shared)  # a training step follows: pi_old is a copy no longer
    assert not loss.old_is_current
    loss.update_target(1.0)
    loss.load_state_dict(loss.state_dict())
    assert not loss.old_is_current


def test_a_rounds_later_passes_reuse_the_items_until_the_old_policy_is_refreshed():
    loss, batch = make_loss(False), chunks()
    first = loss.prepare_pass(batch)
    loss(first[:8])  # an optimizer step's forward: the critic moves, pi_old does not
    assert loss.prepare_pass(batch) is first  # targets fixed between refreshes, as PPO's
    assert loss.prepare_pass(chunks()) is not first  # another round's batch
    loss.update_target(1.0)
    assert loss.prepare_pass(batch) is not first  # pi_old refreshed: V-trace again
