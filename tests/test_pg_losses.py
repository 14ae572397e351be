import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collector.networks.actor_critic import ActorCriticSpec
from collector.networks.squashed import SquashedGaussianSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.losses.a2c import A2CLoss
from learner.losses.ppo import PPOLoss
from learner.losses.reinforce import ReinforceLoss
from learner.losses.sac import SACLoss

SPEC = ActorCriticSpec(obs_dim=3, action_dim=2)


def batch_for(net, *, ratio: float, advantage: float, n: int = 4) -> TensorDict:
    """A batch whose stored log-probabilities make pi / pi_old equal ``ratio`` exactly."""
    torch.manual_seed(0)
    obs = torch.randn(n, 3)
    action = torch.zeros(n, dtype=torch.int64)
    with torch.no_grad():
        logits, value = net(obs)
        log_prob = torch.log_softmax(logits, -1)[:, 0]
    return TensorDict(
        {
            "observation": obs,
            "action": action,
            "log_prob": log_prob - math.log(ratio),
            "value": value,
            "advantage": torch.full((n,), advantage),
            "value_target": value + 1.0,
        },
        batch_size=[n],
    )


@pytest.mark.parametrize(
    ("ratio", "advantage", "objective", "clipped"),
    [
        (1.5, 2.0, -1.2 * 2.0, True),  # A > 0, ratio above 1 + eps: clipped at 1.2
        (1.1, 2.0, -1.1 * 2.0, False),  # A > 0 inside the range: unclipped
        (0.5, -2.0, 0.8 * 2.0, True),  # A < 0, ratio below 1 - eps: clipped at 0.8
        (0.5, 2.0, -0.5 * 2.0, True),  # A > 0, ratio below: the pessimistic (unclipped) bound
        (1.5, -2.0, 1.5 * 2.0, True),  # A < 0, ratio above: the pessimistic (unclipped) bound
    ],
)
def test_ppo_clips_the_surrogate_on_both_sides(ratio, advantage, objective, clipped):
    net = SPEC.build()
    loss = PPOLoss(net, clip_epsilon=0.2, normalize_advantage=False, ent_coef=0.0)
    out = loss(batch_for(net, ratio=ratio, advantage=advantage))
    assert out["loss_objective"].item() == pytest.approx(objective, rel=1e-5)
    assert out["clip_fraction"].item() == (1.0 if clipped else 0.0)
    # k3 estimator of KL(old || new) with log r = log ratio: (r - 1) - log r
    assert out["approx_kl"].item() == pytest.approx((ratio - 1) - math.log(ratio), rel=1e-5)
    assert out["loss_critic"].item() == pytest.approx(0.5 * 0.5 * 1.0, rel=1e-5)


def test_ppo_gradient_vanishes_where_the_ratio_is_clipped():
    net = SPEC.build()
    loss = PPOLoss(net, clip_epsilon=0.2, normalize_advantage=False, vf_coef=0.0)
    loss(batch_for(net, ratio=1.5, advantage=2.0))["loss_objective"].backward()
    assert all(p.grad is None or p.grad.abs().max() == 0 for p in net.actor.parameters())
    net.zero_grad()
    loss(batch_for(net, ratio=1.1, advantage=2.0))["loss_objective"].backward()
    assert max(p.grad.abs().max() for p in net.actor.parameters()) > 0


def test_ppo_clipped_value_loss_takes_the_larger_error():
    net = SPEC.build()
    batch = batch_for(net, ratio=1.0, advantage=1.0)
    batch["value"] = batch["value"] - 1.0  # the new value moved by 1 from the old one
    batch["value_target"] = batch["value"] + 5.0
    loss = PPOLoss(net, vf_coef=1.0, clip_value_loss=True, value_clip_epsilon=0.2)
    # Unclipped error (target - new)^2 = 16, clipped (target - (old + 0.2))^2 = 4.8^2.
    assert loss(batch)["loss_critic"].item() == pytest.approx(0.5 * 4.8**2, rel=1e-5)


def test_a2c_and_reinforce_are_plain_policy_gradients():
    net = SPEC.build()
    batch = batch_for(net, ratio=1.0, advantage=3.0)
    log_prob = batch["log_prob"]
    a2c = A2CLoss(net, ent_coef=0.0)(batch)
    assert a2c["loss_objective"].item() == pytest.approx(-(log_prob * 3.0).mean().item(), rel=1e-5)
    reinforce = ReinforceLoss(net, baseline=False, normalize_advantage=False)(batch)
    assert reinforce["loss_objective"].item() == pytest.approx(a2c["loss_objective"].item())
    assert "loss_critic" not in set(reinforce.keys())
    with_baseline = ReinforceLoss(net, baseline=True, vf_coef=1.0)(batch)
    assert with_baseline["loss_critic"].item() == pytest.approx(0.5, rel=1e-5)


def sac_batch(n: int = 8) -> TensorDict:
    torch.manual_seed(1)
    return TensorDict(
        {
            "observation": torch.randn(n, 3),
            "action": torch.rand(n, 1) * 4 - 2,
            "reward": torch.randn(n),
            "next_observation": torch.randn(n, 3),
            "terminated": torch.zeros(n, dtype=torch.bool),
        },
        batch_size=[n],
    )


def test_sac_temperature_loss_by_hand():
    spec = SquashedGaussianSpec(3, 1, (-2.0,), (2.0,), (16,))
    loss = SACLoss(spec.build(), hidden_sizes=(16,), init_alpha=0.5, target_entropy=-1.0)
    batch = sac_batch()
    torch.manual_seed(7)
    out = loss.loss_alpha(batch)
    torch.manual_seed(7)  # the same draw the loss made
    with torch.no_grad():
        _, log_prob = loss.actor.sample(batch["observation"])
    expected = -(math.log(0.5) * (log_prob + -1.0)).mean()
    assert out["loss_alpha"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert out["alpha"].item() == pytest.approx(0.5)
    out["loss_alpha"].backward()
    # d/d log_alpha of -log_alpha * mean(log pi + H) = -mean(log pi + H)
    assert loss.log_alpha.grad.item() == pytest.approx(-(log_prob - 1.0).mean().item(), rel=1e-5)


def test_sac_tanh_gaussian_log_prob_matches_the_change_of_variables():
    spec = SquashedGaussianSpec(3, 1, (-2.0,), (2.0,), (16,))
    actor = spec.build()
    obs = torch.randn(5, 3)
    torch.manual_seed(3)
    action, log_prob = actor.sample(obs)
    torch.manual_seed(3)
    mean, log_std = actor(obs)
    u = mean + log_std.exp() * torch.randn(mean.shape)
    base = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1)
    expected = base - torch.log(2.0 * (1 - torch.tanh(u) ** 2)).sum(-1)
    torch.testing.assert_close(log_prob, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(action, 2.0 * torch.tanh(u))


def test_sac_critic_target_with_termination():
    spec = SquashedGaussianSpec(3, 1, (-2.0,), (2.0,), (16,))
    loss = SACLoss(spec.build(), gamma=0.9, hidden_sizes=(16,))
    batch = sac_batch(4)
    batch["terminated"] = torch.ones(4, dtype=torch.bool)
    out = loss.loss_critic(batch)
    with torch.no_grad():
        q1 = loss.q1(batch["observation"], batch["action"])
        q2 = loss.q2(batch["observation"], batch["action"])
    # Terminated: the target is the reward alone.
    torch.testing.assert_close(out["td_error"], batch["reward"] - torch.min(q1, q2))


def test_sac_trains_through_the_multi_optimizer_stepper():
    spec = SquashedGaussianSpec(3, 1, (-2.0,), (2.0,), (16,))
    core = LearnerCore(spec, LearnerConfig(loss="sac", hidden_sizes=(16,), lr=1e-2))
    batch = sac_batch(32)
    alpha = core.loss_module.alpha.item()
    before = {k: v.clone() for k, v in core.loss_module.q1_target.state_dict().items()}
    metrics = core.train([batch] * 5)
    assert {"loss_qvalue", "loss_actor", "loss_alpha", "alpha"} <= set(metrics)
    assert core.loss_module.alpha.item() != alpha
    after = core.loss_module.q1_target.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # Polyak moved the targets
    state = core.state_dict()
    restored = LearnerCore(spec, LearnerConfig(loss="sac", hidden_sizes=(16,), lr=1e-2))
    restored.load_state_dict(state)
    assert restored.loss_module.alpha.item() == pytest.approx(core.loss_module.alpha.item())
    assert np.isclose(restored.version, 5)
