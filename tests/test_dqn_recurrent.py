"""Recurrent DQN (#39): the sequence Q-learning core, R2D2 on top of it, refusals, a run.

``algorithm: dqn`` with ``learner.recurrent`` trains ``learner.losses.sequence_q`` over the
sequences R2D2's collectors write; R2D2's loss is the same core with value rescaling.
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from collector.envs.spaces import describe
from collector.networks.recurrent import RecurrentQSpec
from learner.algorithms.dqn import DQNOptions
from learner.config import LearnerConfig
from learner.losses.dqn import DQNLoss, dqn_loss
from learner.losses.r2d2 import R2D2Loss
from learner.losses.sequence_q import SequenceQLoss
from services.config import load_config
from services.config.sections import ConfigError
from services.config.spec import model_spec_for
from services.driver.controller import Controller
from tests.conftest import ROOT

CONFIGS = ROOT / "deploy" / "configs"
CONFIG = "statelesscartpole_dqn_lstm.yaml"


def q_spec(obs_dim=2, kind="lstm"):
    layout = describe(gym.spaces.Box(-1e6, 1e6, (obs_dim,), np.float32))
    return RecurrentQSpec(
        layout, hidden_sizes=(8,), recurrent=kind, recurrent_hidden_size=6, num_actions=2
    )


def sequence_batch(network, steps=7, real=(7, 5), burn_in=2, seed=0):
    """Rows of ``steps`` steps, ``real`` of them valid; the last row ends its episode."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(real)
    valid = torch.arange(steps)[None, :] < torch.tensor(real)[:, None]
    terminated = torch.zeros(rows, steps, dtype=torch.bool)
    terminated[-1, real[-1] - 1] = True
    obs = torch.randn(rows, steps + 1, 2, generator=generator)
    obs_valid = torch.cat([torch.ones(rows, 1, dtype=torch.bool), valid], 1)
    return TensorDict(
        {
            "observation": obs * obs_valid[..., None],
            "action": torch.randint(0, 2, (rows, steps), generator=generator) * valid,
            "reward": torch.rand(rows, steps, generator=generator) * valid,
            "terminated": terminated,
            "truncated": torch.zeros(rows, steps, dtype=torch.bool),
            "valid": valid,
            "recurrent_state": torch.randn(rows, network.core.state_size, generator=generator),
            "burn_in": torch.full((rows,), burn_in),
        },
        batch_size=[rows],
    )


def shifted_target(loss):
    with torch.no_grad():
        for p in loss.target_network.parameters():
            p.add_(0.05)  # a target network that differs from the online one
    return loss


def outputs_and_grads(loss, batch):
    loss.value_network.zero_grad()
    out = loss(batch)
    out["loss_q"].backward()
    grads = [p.grad.clone() for p in loss.value_network.parameters()]
    return [out["loss_q"].detach(), out["td_error"], out["q_mean"], *grads]


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("penalty", ["huber", "squared"])
def test_a_padded_sequence_gives_the_unpadded_loss_gradients_and_priority(double_q, penalty):
    torch.manual_seed(4)
    network = q_spec(kind="gru").build()
    loss = shifted_target(
        SequenceQLoss(network, gamma=0.9, n_step=3, double_q=double_q, penalty=penalty)
    )
    padded = sequence_batch(network, steps=9, real=(6,), burn_in=2)
    padded["reward"] = padded["reward"] * 8  # errors beyond Huber's threshold too
    cut = {k: v[:, :6] for k, v in padded.items() if v.shape[1:2] == (9,)}
    unpadded = TensorDict(
        {**dict(padded.items()), **cut, "observation": padded["observation"][:, :7]},
        batch_size=[1],
    )
    for a, b in zip(
        outputs_and_grads(loss, padded), outputs_and_grads(loss, unpadded), strict=True
    ):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_burn_in_steps_carry_no_gradient_and_the_stored_state_none():
    torch.manual_seed(3)
    network = q_spec().build()
    loss = SequenceQLoss(network, n_step=3, penalty="huber")
    batch = sequence_batch(network, burn_in=3)
    batch["observation"].requires_grad_(True)
    batch["recurrent_state"].requires_grad_(True)
    loss(batch)["loss_q"].backward()
    grad = batch["observation"].grad
    assert torch.all(grad[:, :3] == 0) and batch["recurrent_state"].grad is None
    assert grad[:, 3:].abs().sum() > 0  # the learning steps do carry it


@pytest.mark.parametrize("double_q", [True, False])
def test_huber_one_step_targets_match_a_hand_computation(double_q):
    torch.manual_seed(2)
    network = q_spec().build()
    loss = shifted_target(
        SequenceQLoss(network, gamma=0.9, n_step=1, double_q=double_q, penalty="huber",
                      priority_eta=0.5)
    )  # fmt: skip
    batch = sequence_batch(network)
    batch["reward"] = batch["reward"] * 5
    batch["weight"] = torch.tensor([0.5, 2.0])
    out = loss(batch)
    with torch.no_grad():  # the whole sequence from the stored state: burn-in is a split only
        q, _ = network(batch["observation"], batch["recurrent_state"])
        q_target, _ = loss.target_network(batch["observation"], batch["recurrent_state"])
    per_item, priorities, largest = [], [], 0.0
    for row in range(2):
        real = int(batch["valid"][row].sum())
        deltas, huber = [], []
        for t in range(2, real):
            chooser = q if double_q else q_target
            best = chooser[row, t + 1].argmax()
            done = bool(batch["terminated"][row, t])
            y = batch["reward"][row, t] + 0.9 * (not done) * q_target[row, t + 1, best]
            q_t = q[row, t, batch["action"][row, t]]
            deltas.append(abs(float(y - q_t)))
            huber.append(float(F.smooth_l1_loss(q_t, y)))
        per_item.append(float(batch["weight"][row]) * sum(huber) / len(huber))
        priorities.append(0.5 * max(deltas) + 0.5 * sum(deltas) / len(deltas))
        largest = max(largest, *deltas)
    assert largest > 1  # the linear part of Huber is exercised
    np.testing.assert_allclose(out["td_error"].numpy(), priorities, rtol=1e-4, atol=1e-6)
    assert float(out["loss_q"].detach()) == pytest.approx(sum(per_item) / 2, rel=1e-4)


# R2D2's loss before the refactor onto learner.losses.sequence_q (recorded with the code of
# c55c4d7): (loss_q, q_mean, priorities, sum of all gradients) per case.
R2D2_BEFORE = [
    (
        dict(kind="lstm", gamma=0.97, n_step=3, value_rescaling=True, steps=7, real=(7, 5),
             burn_in=2, weight=True),
        (0.0986863225698471, 0.36709246039390564, [1.2083959579467773, 0.3781946897506714],
         -0.46136432290518314),
    ),
    (
        dict(kind="gru", gamma=0.9, n_step=1, value_rescaling=False, steps=6, real=(6, 3, 4),
             burn_in=0, weight=False),
        (0.19757740199565887, 0.06258288770914078,
         [1.0113756656646729, 0.7315567135810852, 0.9644131660461426], -0.5752286139459102),
    ),
    (
        dict(kind="lstm", gamma=0.99, n_step=5, value_rescaling=True, priority_eta=0.5, steps=9,
             real=(9, 4), burn_in=3, weight=True),
        (0.061142537742853165, 0.059553008526563644, [0.8765889406204224, 0.05803941190242767],
         -0.19702349947488074),
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(R2D2_BEFORE)))
def test_r2d2_loss_is_unchanged_by_the_refactor(case):
    fields, (loss_q, q_mean, priorities, grad_sum) = R2D2_BEFORE[case]
    fields = dict(fields)
    torch.manual_seed(10 + case)
    network = q_spec(kind=fields.pop("kind")).build()
    shape = {k: fields.pop(k) for k in ("steps", "real", "burn_in")}
    weight = fields.pop("weight")
    loss = shifted_target(R2D2Loss(network, **fields))
    batch = sequence_batch(network, seed=case, **shape)
    if weight:
        batch["weight"] = torch.linspace(0.5, 1.0, batch.batch_size[0])
    out = loss(batch)
    out["loss_q"].backward()
    assert float(out["loss_q"].detach()) == pytest.approx(loss_q, rel=1e-6, abs=1e-7)
    assert float(out["q_mean"]) == pytest.approx(q_mean, rel=1e-6, abs=1e-7)
    np.testing.assert_allclose(out["td_error"].numpy(), priorities, rtol=1e-6, atol=1e-7)
    total = sum(float(p.grad.double().sum()) for p in network.parameters())
    assert total == pytest.approx(grad_sum, rel=1e-5, abs=1e-6)


def test_r2d2_without_rescaling_is_the_squared_core():
    torch.manual_seed(7)
    network = q_spec().build()
    r2d2 = R2D2Loss(network, gamma=0.95, n_step=2, value_rescaling=False)
    core = SequenceQLoss(network, gamma=0.95, n_step=2, penalty="squared")
    core.target_network.load_state_dict(r2d2.target_network.state_dict())
    batch = sequence_batch(network)
    a, b = r2d2(batch), core(batch)
    for key in ("loss_q", "q_mean", "td_error"):
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_the_dqn_factory_builds_the_sequence_loss_only_for_a_recurrent_network():
    torch.manual_seed(8)
    network = q_spec().build()
    config = LearnerConfig(recurrent="gru", double_dqn=False, gamma=0.9, dqn=DQNOptions(n_step=4))
    loss = dqn_loss(network, config)
    assert type(loss) is SequenceQLoss
    assert (loss.n_step, loss.double_q, loss.penalty, loss.gamma) == (4, False, "huber", 0.9)
    loss.update_target(tau=1.0)
    for target, online in zip(loss.target_network.parameters(), network.parameters(), strict=True):
        assert torch.equal(target, online) and not target.requires_grad
    assert type(dqn_loss(torch.nn.Linear(2, 2), LearnerConfig())) is DQNLoss


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["learner.dqn.n_step=5"], "learner.dqn.n_step"),
        (["collector.n_step=1"], "learner.dqn.n_step"),
        (["replay.sequence_length=0", "replay.burn_in=0", "replay.sequence_overlap=0"],
         "replay.sequence_length"),
        (["learner.dqn.priority_eta=1.5"], "learner.dqn.priority_eta"),
        (["learner.dqn.n_step=0"], "learner.dqn.n_step"),
        (["replay.frame_stack=4"], "replay.frame_stack"),
        (["learner.loss=torchrl:DQNLoss", "collector.n_step=1", "learner.dqn.n_step=1"],
         "learner.loss"),
        (["learner.recurrent=none"], "replay.sequence_length"),
        (["collector.env_id=collector.envs.testing:corridor"], "replay.sequence_length"),
    ],
)  # fmt: skip
def test_recurrent_dqn_refuses_what_cannot_train_naming_the_field(overrides, named):
    with pytest.raises(ConfigError, match=f"^{named}"):
        config = load_config(CONFIGS / CONFIG, overrides)
        model_spec_for(config)  # the checks that need the env's spaces


def test_feed_forward_dqn_ignores_the_recurrent_options():
    config = load_config(CONFIGS / "cartpole_dqn.yaml", ["learner.dqn.n_step=7"])
    assert config.learner.recurrent == "none" and config.learner.dqn.n_step == 7
    assert type(dqn_loss(torch.nn.Linear(4, 2), config.learner)) is DQNLoss


@pytest.mark.slow
def test_recurrent_dqn_trains_on_sequences_and_resumes_from_its_checkpoint(ray_cluster, tmp_path):
    small = [
        "metrics.enabled=false",
        # One collector and one shard: each actor imports torch as it starts, and neither the
        # training signal nor the resume needs a second.
        "collector.num_collectors=1",
        "replay.num_shards=1",
        "collector.envs_per_collector=4",
        "collector.rollout_frames=128",
        "controller.init_random_frames=1000",
        "controller.utd_ratio=0.1",
        "collector.epsilon_anneal_frames=4000",
        "controller.log_interval_s=1",
        "learner.lr=0.002",
    ]
    root = tmp_path / "ckpts"
    at_end = ["controller.total_frames=5000", f"checkpoint.dir={root}", "checkpoint.at_end=true"]
    config = load_config(CONFIGS / CONFIG, [*small, *at_end])
    rounds: list = []
    first = Controller(config)
    first.register("round", lambda c, r: rounds.append(r))
    try:
        first.setup()
        first.train()
        summary = first.summary()
        params = first.learners.parameters()
    finally:
        first.shutdown()
    # Frames are the sequences' real steps, each counted once from the rollout receipts.
    assert summary["frames"] == summary["transitions"] >= 5000
    assert summary["optim_steps"] > 300 and rounds
    losses = [r.metrics["loss_q"] for r in rounds]
    assert all(math.isfinite(x) for x in losses) and {"q_mean"} <= set(rounds[-1].metrics)
    # Learning signal: Q rises from its initial ~0 towards the discounted returns (~1 per step;
    # about 9 after these rounds, so the bar leaves a wide margin).
    q_means = [r.metrics["q_mean"] for r in rounds]
    assert q_means[-1] > max(q_means[0] + 3.0, 4.0), q_means

    resumed = load_config(
        CONFIGS / CONFIG,
        [*small, "controller.total_frames=6000", f"checkpoint.dir={tmp_path / 'ckpts-b'}"],
    )
    second = Controller(resumed, resume_from=root)
    try:
        second.setup()
        counters = second.counters
        assert counters.collected_frames == summary["frames"]
        assert counters.model_version == summary["optim_steps"]
        restored = second.learners.parameters()
        for name, value in params.items():
            torch.testing.assert_close(restored[name], value, rtol=0, atol=0)
        assert sum(s["size"] for s in second.replay.stats()) > 0  # the sequences came back
        second.train()
        assert second.counters.collected_frames >= 6000
        assert second.counters.model_version > summary["optim_steps"]
    finally:
        second.shutdown()
