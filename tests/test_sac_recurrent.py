"""Recurrent SAC (#39): the sequence loss on hand batches, acting with state, refusals, a run."""

import io
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collector.envs.spaces import describe
from collector.networks.recurrent_squashed import RecurrentSquashedSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.losses.sac_sequences import SequenceSACLoss
from services.config import load_config
from services.config.sections import ConfigError
from services.config.spec import model_spec_for
from services.policy.heads import PolicyHead
from tests.conftest import ROOT
from tests.test_algorithms_run import run_config

METHODS = ("loss_critic", "loss_actor", "loss_alpha")
TERMS = {"loss_critic": "loss_qvalue", "loss_actor": "loss_actor", "loss_alpha": "loss_alpha"}


def sac_spec(kind="lstm"):
    layout = describe(gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    return RecurrentSquashedSpec(
        layout, (8,), kind, 5, action_dim=1, action_low=(-2.0,), action_high=(2.0,)
    )


def sequence_batch(network, steps=6, real=(6, 4), burn_in=0, seed=0):
    """Sequences of ``steps`` with ``real[i]`` real steps in row ``i`` (padding zeroed)."""
    g = torch.Generator().manual_seed(seed)
    rows = len(real)
    valid = torch.arange(steps)[None, :] < torch.tensor(real)[:, None]
    obs_valid = torch.cat([torch.ones(rows, 1, dtype=torch.bool), valid], 1)
    terminated = torch.zeros(rows, steps, dtype=torch.bool)
    terminated[-1, real[-1] - 1] = True  # the last row ends its episode
    return TensorDict(
        {
            "observation": torch.randn(rows, steps + 1, 2, generator=g) * obs_valid[..., None],
            "action": (torch.rand(rows, steps, 1, generator=g) * 4 - 2) * valid[..., None],
            "reward": torch.randn(rows, steps, generator=g) * valid,
            "terminated": terminated,
            "truncated": torch.zeros(rows, steps, dtype=torch.bool),
            "valid": valid,
            "recurrent_state": torch.randn(rows, network.spec.state_size, generator=g),
            "burn_in": torch.full((rows,), burn_in),
        },
        batch_size=[rows],
    )


def run_method(loss, method, batch, seed=7):
    """A method's outputs and the gradients it leaves (sampling seeded)."""
    loss.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = getattr(loss, method)(batch)
    out[TERMS[method]].backward()
    grads = {n: p.grad.clone() for n, p in loss.named_parameters() if p.grad is not None}
    return out, grads


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_loss_on_a_padded_sequence_equals_the_unpadded_one(kind):
    torch.manual_seed(1)
    network = sac_spec(kind).build()
    loss = SequenceSACLoss(network)
    padded = sequence_batch(network, steps=9, real=(6,), burn_in=2)
    unpadded = TensorDict(
        {
            **{k: padded[k][:, :6] for k in ("action", "reward", "terminated", "truncated")},
            "valid": padded["valid"][:, :6],
            "observation": padded["observation"][:, :7],
            "recurrent_state": padded["recurrent_state"],
            "burn_in": padded["burn_in"],
        },
        batch_size=[1],
    )
    for method in METHODS:
        out_p, grads_p = run_method(loss, method, padded)
        out_u, grads_u = run_method(loss, method, unpadded)
        assert grads_p.keys() == grads_u.keys() and grads_p, method
        for key, value in out_u.items():
            torch.testing.assert_close(out_p[key], value, atol=1e-6, rtol=1e-5)
        for name in grads_u:
            torch.testing.assert_close(grads_p[name], grads_u[name], atol=1e-6, rtol=1e-5)


def test_padding_never_enters_a_loss():
    torch.manual_seed(2)
    network = sac_spec().build()
    loss = SequenceSACLoss(network)
    batch = sequence_batch(network, steps=8, real=(8, 3), burn_in=1)
    garbage = batch.clone()
    pad = ~garbage["valid"]
    garbage["reward"][pad] = 1e6
    garbage["action"][pad] = 1.5
    garbage["terminated"][pad] = True
    garbage["observation"][1, 5:] = 1e3  # o_4 .. o_8 of row 1 follow padded steps
    for method in METHODS:
        out, grads = run_method(loss, method, batch)
        out_g, grads_g = run_method(loss, method, garbage)
        torch.testing.assert_close(out[TERMS[method]], out_g[TERMS[method]])
        for name in grads:
            torch.testing.assert_close(grads[name], grads_g[name])


def test_burn_in_steps_carry_no_gradient():
    torch.manual_seed(3)
    network = sac_spec().build()
    loss = SequenceSACLoss(network)
    for method in ("loss_critic", "loss_actor"):
        batch = sequence_batch(network, steps=7, real=(7, 7), burn_in=3)
        batch["observation"].requires_grad_(True)
        batch["recurrent_state"].requires_grad_(True)
        run_method(loss, method, batch)
        grad = batch["observation"].grad
        assert torch.all(grad[:, :3] == 0), method
        assert grad[:, 3:7].abs().sum() > 0, method  # the learning steps do carry it
        assert batch["recurrent_state"].grad is None, method


def test_the_unrolled_state_is_the_state_at_the_last_real_step():
    torch.manual_seed(4)
    network = sac_spec().build()
    loss = SequenceSACLoss(network)
    batch = sequence_batch(network, steps=8, real=(8, 5), burn_in=2)
    states = network.split_state(batch["recurrent_state"])
    for core, state in zip((network.actor, network.q1, network.q2), states, strict=True):
        memories, last = loss.unroll(core, batch, state, exact_state=True)
        fused, _ = loss.unroll(core, batch, state)  # the losses' call: padding not skipped
        assert memories.shape == fused.shape and memories.shape[:2] == (2, 8 + 1 - 2)
        real_memories = torch.arange(7)[None, :] < torch.tensor([[7], [5 + 1 - 2]])
        torch.testing.assert_close(memories[real_memories], fused[real_memories])
        for row, real in enumerate((8, 5)):
            step_state = state[row : row + 1]
            for t in range(real + 1):  # o_0 .. o_E, one step at a time
                _, step_state = core.memories(
                    batch["observation"][row : row + 1, t : t + 1], step_state
                )
            torch.testing.assert_close(last[row : row + 1], step_state, atol=1e-6, rtol=1e-5)


def test_acting_one_step_at_a_time_matches_the_network_on_the_sequence():
    torch.manual_seed(5)
    spec = sac_spec()
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    obs = np.random.default_rng(0).normal(size=(3, 6, 2)).astype(np.float32)
    state = policy.initial_state(3)
    actions = []
    for t in range(6):
        action, extras, state = policy.act(obs[:, t], {"deterministic": True}, state=state)
        actions.append(action)
        assert extras == {}
    with torch.no_grad():
        mean, _, last = network(torch.from_numpy(obs), network.initial_state(3))
    np.testing.assert_allclose(state, last.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.stack(actions, 1), network.mode(mean).numpy(), atol=1e-5)
    random, _, after = policy.act(obs[:, 0], {"random": True}, state=policy.initial_state(3))
    assert np.all(np.abs(random) <= 2.0) and np.abs(after).sum() > 0  # the state still advances


def test_targets_follow_the_critics_softly_and_the_checkpoint_round_trips():
    torch.manual_seed(6)
    network = sac_spec().build()
    loss = SequenceSACLoss(network, init_alpha=0.5)
    with torch.no_grad():
        for p in network.q1.parameters():
            p.add_(1.0)
    before = [p.clone() for p in loss.q1_target.parameters()]
    loss.update_target(0.25)
    for old, new, online in zip(
        before, loss.q1_target.parameters(), network.q1.parameters(), strict=True
    ):
        torch.testing.assert_close(new, old + 0.25 * (online - old))
    buffer = io.BytesIO()
    torch.save(loss.state_dict(), buffer)
    buffer.seek(0)
    restored = SequenceSACLoss(sac_spec().build())
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    batch = sequence_batch(network, burn_in=1)
    for method in METHODS:
        torch.manual_seed(0)
        a = getattr(loss, method)(batch)
        torch.manual_seed(0)
        b = getattr(restored, method)(batch)
        torch.testing.assert_close(a[TERMS[method]], b[TERMS[method]])
    assert math.isclose(float(restored.alpha), 0.5, rel_tol=1e-6)


def test_recurrent_sac_trains_through_the_stepper_and_its_learner_state_round_trips():
    torch.manual_seed(9)
    spec = sac_spec("gru")
    config = LearnerConfig(loss="sac", recurrent="gru", hidden_sizes=(8,), lr=1e-2)
    core = LearnerCore(spec, config)
    assert isinstance(core.loss_module, SequenceSACLoss)
    batch = sequence_batch(core.loss_module.network, steps=6, real=(6, 4, 2), burn_in=1)
    alpha = core.loss_module.alpha.item()
    actor_before = [p.clone() for p in core.loss_module.network.actor.parameters()]
    metrics = core.train([batch] * 3)
    assert {"loss_qvalue", "loss_actor", "loss_alpha", "alpha", "entropy"} <= set(metrics)
    assert all(math.isfinite(float(v)) for v in metrics.values())
    assert core.loss_module.alpha.item() != alpha
    moved = core.loss_module.network.actor.parameters()
    assert any(not torch.equal(a, b) for a, b in zip(actor_before, moved, strict=True))
    restored = LearnerCore(spec, config)
    restored.load_state_dict(core.state_dict())
    for a, b in zip(
        core.loss_module.state_dict().values(),
        restored.loss_module.state_dict().values(),
        strict=True,
    ):
        torch.testing.assert_close(a, b)
    assert restored.version == core.version == 3


def test_the_policy_head_acts_with_the_squashed_mean_and_returns_the_state():
    torch.manual_seed(8)
    network = sac_spec().build()
    head = PolicyHead(network, "recurrent_squashed", gym.spaces.Box(-2.0, 2.0, (1,)))
    obs, state = torch.randn(4, 2), torch.randn(4, network.spec.state_size)
    action, next_state = head(obs, state)
    mean, _, expected_state = network(obs.unsqueeze(1), state)
    torch.testing.assert_close(action, network.mode(mean[:, 0]))
    torch.testing.assert_close(next_state, expected_state)
    assert head.recurrent and head.output == "action"


@pytest.mark.parametrize(
    ("config", "overrides", "named"),
    [
        ("pendulum_sac_lstm.yaml", ["replay.sequence_length=0", "replay.burn_in=0",
                                    "replay.sequence_overlap=0"], "replay.sequence_length"),
        ("pendulum_sac_lstm.yaml", ["collector.n_step=3"], "collector.n_step"),
        ("pendulum_sac_lstm.yaml", ["learner.sac.critic_hidden_sizes=[64]"],
         "learner.sac.critic_hidden_sizes"),
        ("pendulum_sac_lstm.yaml", ["learner.network=my_nets:actor"], "learner.network"),
        ("pendulum_sac.yaml", ["replay.sequence_length=8"], "replay.sequence_length"),
    ],
)  # fmt: skip
def test_recurrent_sac_refuses_what_it_cannot_train_naming_the_field(config, overrides, named):
    with pytest.raises(ConfigError, match=f"^{named}:"):
        config = load_config(ROOT / "deploy" / "configs" / config, overrides)
        model_spec_for(config)


@pytest.mark.slow
def test_recurrent_sac_runs_end_to_end_on_stateless_pendulum(ray_cluster, tmp_path):
    summary, _, rounds = run_config(
        "pendulum_sac_lstm.yaml",
        tmp_path,
        "controller.total_frames=2400",
        "controller.init_random_frames=800",
        "controller.utd_ratio=0.05",
        "replay.sequence_length=16",
        "replay.sequence_overlap=8",
        "replay.burn_in=4",
        "learner.recurrent=gru",
        "learner.recurrent_hidden_size=16",
        "learner.hidden_sizes=[16]",
        "learner.global_batch_size=8",
    )
    # Frames are the sequences' real steps, each counted once however many sequences hold it.
    assert summary["frames"] == summary["transitions"] >= 2400
    assert summary["optim_steps"] >= 50
    metrics = rounds[-1].metrics
    assert {"loss_qvalue", "loss_actor", "loss_alpha", "alpha", "entropy"} <= set(metrics)
    assert all(math.isfinite(float(v)) for v in metrics.values()), metrics
