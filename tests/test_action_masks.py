"""Action masks and factorised action spaces, unit level (no Ray): the math, the workers, refusals.

The runs through collectors, replay, learners and checkpoints are in ``test_masked_run.py``.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collector.chunks import ChunkWorker
from collector.envs.connect4 import ConnectFour, random_baseline
from collector.envs.masks import MaskReader, MaskToInfo, count_invalid, vector_mask
from collector.envs.vector import make_vector_env
from collector.networks.actor_critic import ActorCriticSpec
from collector.networks.distributions import MultiBernoulli, MultiCategorical, masked_logits
from collector.networks.q_mlp import ModelSpec
from collector.onpolicy import OnPolicyTransform, OnPolicyWorker
from collector.rollout import RolloutWorker
from learner.losses.chunks import evaluate_chunks
from learner.losses.common import evaluate_actions
from learner.losses.dqn import DQNLoss
from learner.losses.ppo import PPOLoss
from services.config import ConfigError, load_config
from services.config.spec import env_spaces, model_spec_for
from services.policy.policy import Policy
from tests.conftest import ROOT

CONNECT4 = "collector.envs.connect4:connect_four"
KEY = "action_mask"


# As collectors run: one torch thread (small forwards on a busy host).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def hand_masked(logits: torch.Tensor, mask: torch.Tensor, action: torch.Tensor):
    """log pi(action) and the entropy over the allowed actions, written out."""
    log_prob, entropy = [], []
    for values, allowed, a in zip(logits.tolist(), mask.tolist(), action.tolist(), strict=True):
        row = [math.exp(v) if m else 0.0 for v, m in zip(values, allowed, strict=True)]
        total = sum(row)
        probs = [x / total for x in row]
        log_prob.append(math.log(probs[a]))
        entropy.append(-sum(p * math.log(p) for p in probs if p > 0))
    return torch.tensor(log_prob), torch.tensor(entropy)


def test_masked_log_prob_and_entropy_match_a_hand_computation():
    torch.manual_seed(0)
    network = ActorCriticSpec(3, 4).build()
    obs = torch.randn(5, 3)
    mask = torch.tensor([[1, 0, 1, 1], [0, 1, 0, 0], [1, 1, 1, 1], [0, 0, 1, 1], [1, 0, 0, 1]])
    action = torch.tensor([2, 1, 0, 3, 0])
    batch = TensorDict({"observation": obs, "action": action, "action_mask": mask.bool()}, [5])
    log_prob, entropy, _ = evaluate_actions(network, batch)
    log_prob, entropy = log_prob.detach(), entropy.detach()
    logits = network(obs)[0].detach()
    want_lp, want_h = hand_masked(logits, mask, action)
    assert torch.allclose(log_prob, want_lp, atol=1e-5)
    assert torch.allclose(entropy, want_h, atol=1e-5)
    assert float(entropy[1]) == pytest.approx(0.0, abs=1e-6)  # one allowed action
    unmasked = torch.distributions.Categorical(logits=logits)
    assert (unmasked.entropy() > entropy + 1e-3)[[0, 1, 3, 4]].all()  # masked rows: less
    # chunks (IMPALA, APPO): [B, T + 1] observations, [B, T] masks
    chunk = TensorDict(
        {
            "observation": torch.cat([obs, obs[:1]]).reshape(1, 6, 3),
            "action": action[None],
            "action_mask": mask.bool()[None],
        },
        [1],
    )
    chunk_lp, chunk_h = evaluate_chunks(network, chunk)[:2]
    assert torch.allclose(chunk_lp[0].detach(), want_lp, atol=1e-5)
    assert torch.allclose(chunk_h[0].detach(), want_h, atol=1e-5)


@pytest.mark.parametrize("double", [True, False])
def test_dqn_target_never_takes_the_max_over_a_masked_action(double):
    network = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():  # Q(s) = [1, 2, 10] * s[0]: action 2 the best by far
        network.weight.copy_(torch.tensor([[1.0, 0.0], [2.0, 0.0], [10.0, 0.0]]))
    loss = DQNLoss(network, gamma=0.5, double_dqn=double)
    batch = TensorDict(
        {
            "observation": torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
            "action": torch.tensor([0, 0]),
            "reward": torch.tensor([0.0, 0.0]),
            "next_observation": torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
            "next_action_mask": torch.tensor([[True, True, False], [True, True, True]]),
            "terminated": torch.tensor([False, False]),
        },
        [2],
    )
    target = loss(batch)["td_error"] + 1.0  # q = 1 for action 0
    assert target.tolist() == [0.5 * 2.0, 0.5 * 10.0]  # max over allowed {0, 1}; then all


def test_epsilon_greedy_acts_among_allowed_actions_only():
    spec = ModelSpec(2, 4)
    network = spec.build()
    torch.nn.init.zeros_(network[-1].weight)
    with torch.no_grad():
        network[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0, 3.0]))  # greedy: 3 unless masked
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    obs = np.zeros((400, 2), np.float32)
    mask = np.tile([True, True, False, False], (400, 1))
    mask[::2] = [False, False, True, False]
    greedy, _ = policy.act(obs, {"epsilon": 0.0}, mask=mask)
    assert set(greedy[1::2]) == {1} and set(greedy[::2]) == {2}
    explored, _ = policy.act(obs, {"epsilon": 1.0}, mask=mask)
    assert count_invalid(explored, mask) == 0
    assert set(explored[1::2]) == {0, 1} and set(explored[::2]) == {2}
    unmasked, _ = policy.act(obs, {"epsilon": 1.0})
    assert count_invalid(unmasked, mask) > 100  # the count sees forbidden actions


def test_stochastic_actor_samples_allowed_actions_with_their_masked_log_prob():
    spec = ActorCriticSpec(3, 5)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(1))
    obs = np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32)
    mask = np.random.default_rng(1).random((300, 5)) < 0.4
    mask[:, 4] |= ~mask.any(-1)
    actions, extras = policy.act(obs, {}, mask=mask)
    assert count_invalid(actions, mask) == 0
    logits = policy.network(torch.as_tensor(obs))[0].detach()
    want, _ = hand_masked(logits, torch.as_tensor(mask), torch.as_tensor(actions))
    assert np.allclose(extras["log_prob"], want.numpy(), atol=1e-5)
    greedy, _ = policy.act(obs, {"deterministic": True}, mask=mask)
    assert count_invalid(greedy, mask) == 0


def test_factorised_log_prob_and_entropy_are_sums_over_dimensions():
    torch.manual_seed(0)
    logits = torch.randn(6, 5)
    multi = MultiCategorical(logits, (3, 2))
    action = multi.sample(torch.Generator().manual_seed(0))
    first = torch.distributions.Categorical(logits=logits[:, :3])
    second = torch.distributions.Categorical(logits=logits[:, 3:])
    assert torch.allclose(
        multi.log_prob(action), first.log_prob(action[:, 0]) + second.log_prob(action[:, 1])
    )
    assert torch.allclose(multi.entropy(), first.entropy() + second.entropy())
    masked = MultiCategorical(masked_logits(logits, torch.tensor([1, 0, 1, 0, 1]).bool()), (3, 2))
    picks = masked.sample(torch.Generator().manual_seed(1))
    assert set(picks[:, 0].tolist()) <= {0, 2} and set(picks[:, 1].tolist()) == {1}
    bits = MultiBernoulli(logits[:, :3])
    sample = bits.sample(torch.Generator().manual_seed(0))
    each = torch.distributions.Bernoulli(logits=logits[:, :3])
    assert torch.allclose(bits.log_prob(sample), each.log_prob(sample.float()).sum(-1))
    assert torch.allclose(bits.entropy(), each.entropy().sum(-1))


@pytest.mark.parametrize(
    ("env_id", "action_shape"), [("tests.action_envs:multi_discrete", (2,)),
                                 ("tests.action_envs:multi_binary", (3,))]
)  # fmt: skip
def test_factorised_actions_go_through_the_on_policy_worker_and_the_ppo_loss(env_id, action_shape):
    config = load_config(overrides=["algorithm=ppo", f"collector.env_id={env_id}"])
    spec = model_spec_for(config)
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    envs = make_vector_env(env_id, 4, autoreset="same_step")
    batch = OnPolicyWorker(envs, policy, [1, 2, 3, 4], OnPolicyTransform()).rollout(16, {}, 0)
    actions = batch.transitions["action"]
    assert actions.shape == (64, *action_shape) and actions.dtype == np.int64
    assert all(envs.single_action_space.contains(a) for a in actions.astype(np.int64))
    data = TensorDict({k: torch.as_tensor(v) for k, v in batch.transitions.items()}, [64])
    log_prob = evaluate_actions(network, data)[0]
    assert torch.allclose(log_prob, data["log_prob"], atol=1e-5)  # stored = recomputed
    out = PPOLoss(network)(data)
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    total.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in network.parameters())


def test_workers_take_no_invalid_action_and_store_the_masks():
    spec = ModelSpec(84, 7)
    dqn = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    envs = make_vector_env(CONNECT4, 4, action_mask_key=KEY)
    worker = RolloutWorker(envs, dqn, [1, 2, 3, 4], n_step=3, action_mask_key=KEY)
    invalid = 0
    for epsilon in (1.0, 0.3, 0.0):  # exploring, mixed, greedy
        batch = worker.rollout(150, {"epsilon": epsilon}, 0)
        invalid += batch.invalid_actions
        columns = batch.transitions
        assert columns["action_mask"].shape == columns["next_action_mask"].shape
        assert columns["action_mask"][np.arange(batch.frames), columns["action"]].all()
    assert invalid == 0 == worker.masks.invalid_actions
    spec = ActorCriticSpec(84, 7)
    ppo = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    envs = make_vector_env(CONNECT4, 4, action_mask_key=KEY, autoreset="same_step")
    worker = OnPolicyWorker(envs, ppo, [1, 2, 3, 4], OnPolicyTransform(), action_mask_key=KEY)
    batch = worker.rollout(200, {}, 0)
    assert batch.invalid_actions == 0 and batch.transitions["action_mask"].shape == (800, 7)
    assert len(batch.episode_returns) > 20
    chunks = ChunkWorker(make_vector_env(CONNECT4, 2, action_mask_key=KEY), ppo, [1, 2],
                         action_mask_key=KEY).rollout(100, {}, 0)  # fmt: skip
    assert chunks.invalid_actions == 0 and chunks.transitions["action_mask"].shape == (2, 100, 7)


def test_masks_leave_the_observation_or_come_from_the_info():
    env = MaskToInfo(ConnectFour(), KEY)
    assert env.observation_space == gym.spaces.Box(0.0, 1.0, (84,), np.float32)
    obs, info = env.reset(seed=0)
    assert obs.shape == (84,) and info[KEY].dtype == bool and info[KEY].all()
    envs = make_vector_env("tests.action_envs:info_masked", 3, action_mask_key="legal")
    reader = MaskReader("legal", envs.single_action_space, 3)
    obs, info = envs.reset(seed=[0, 1, 2])
    for _ in range(3):  # the observation's first entry says whether action 0 is allowed
        mask = reader.read(info)
        assert mask[:, 1:].all() and (mask[:, 0] == (obs[:, 0] == 1)).all()
        assert reader.count(np.zeros(3, np.int64), mask) == int((obs[:, 0] == 0).sum())
        obs, _, _, _, info = envs.step(np.ones(3, np.int64))
    assert reader.invalid_actions > 0
    assert vector_mask({}, "legal", 2, 4).all()  # no mask reported: everything allowed


def test_connect4_plays_the_learner_against_random_legal_replies():
    env = ConnectFour()
    obs, _ = env.reset(seed=0)
    for _ in range(6):  # fill column 0: the opponent may reply there too
        if not obs["action_mask"][0]:
            break
        obs, reward, done, _, info = env.step(0)
        if done:
            break
    if not done:
        assert not obs["action_mask"][0]
        _, reward, done, _, info = env.step(0)  # a full column: an illegal move loses
        assert (reward, done, info["illegal"]) == (-1.0, True, True)
    rates = random_baseline(games=300, seed=1)
    assert 0.45 < rates["win"] < 0.65  # the first player's edge, about 0.556 over 4,000 games


def test_refusals_name_the_space_or_the_field():
    cases = [
        (["algorithm=dqn", "collector.env_id=tests.action_envs:multi_discrete"], "MultiDiscrete"),
        (["algorithm=sac", "collector.env_id=tests.action_envs:multi_binary"], "MultiBinary"),
        (["algorithm=ppo", "collector.env_id=tests.action_envs:tuple_actions"], "Tuple"),
        (["algorithm=sac", "collector.env_id=Pendulum-v1", f"collector.action_mask_key={KEY}"],
         "collector.action_mask_key"),
        (["algorithm=iql", f"collector.env_id={CONNECT4}", f"collector.action_mask_key={KEY}"],
         "collector.env_id"),  # masks per agent: tests/test_agent_masks.py; connect4 has one
        (["algorithm=dqn", "collector.env_id=CartPole-v1", f"collector.action_mask_key={KEY}",
          "replay.frame_stack=4"], "replay.frame_stack"),
    ]  # fmt: skip
    for overrides, named in cases:
        with pytest.raises(ConfigError, match=named):
            env_spaces(load_config(overrides=overrides))


def test_a_policy_of_a_masked_run_acts_and_exports_under_the_mask(tmp_path):
    config = load_config(ROOT / "deploy" / "configs" / "connect4_ppo_masked.yaml")
    spaces = env_spaces(config)
    assert spaces[0].shape == (84,)
    spec = model_spec_for(config, spaces)
    network = spec.build()
    with torch.no_grad():
        network.actor[-1].bias.copy_(torch.tensor([0, 0, 0, 50.0, 0, 0, 0]))  # column 3
    policy = Policy(network, spec, config, *spaces)
    obs, _ = ConnectFour().reset(seed=0)
    assert policy.act(obs) == 3 and policy.act(obs["observation"]) == 3
    only = np.array([1, 0, 0, 0, 0, 0, 1], np.int8)
    assert policy.act({**obs, KEY: only}) in (0, 6)
    batch = np.stack([obs["observation"]] * 8)
    assert set(policy.act(batch, mask=np.tile(only, (8, 1)))) <= {0, 6}
    sampled = policy.act(batch, deterministic=False, mask=np.tile(only, (8, 1)))
    assert set(sampled.tolist()) <= {0, 6}
    from services.policy.export import export_policy

    written = export_policy(policy, "pt2", tmp_path / "policy.pt2")
    assert written["mask"] == {"name": "action_mask", "shape": ["batch", 7], "dtype": "bool"}
    program = torch.export.load(str(tmp_path / "policy.pt2")).module()
    scores = program(torch.as_tensor(batch), torch.as_tensor(np.tile(only, (8, 1))).bool())
    assert set(scores.argmax(-1).tolist()) <= {0, 6}


def test_the_driver_sums_the_invalid_actions_of_rollout_receipts():
    from collector.receipts import RolloutReceipt
    from services.driver.accounting import Accounting, ReturnGoals

    accounting = Accounting(frame_skip=1, goals=ReturnGoals(episode_window=1))
    for invalid in (0, 3, 2):
        receipt = RolloutReceipt(0, 0, 8, (), (), 0, 0, (), 0.1, 0.0, invalid_actions=invalid)
        accounting.count(receipt)
    assert accounting.counters.invalid_actions == 5
    restored = Accounting(frame_skip=1, goals=ReturnGoals(episode_window=1))
    restored.load_state_dict(accounting.state_dict())  # a checkpoint carries the count
    assert restored.counters.invalid_actions == 5


def test_a_mask_beside_a_dict_observation_leaves_it_before_the_keys_are_flattened():
    env_id = "tests.action_envs:masked_corridor"
    overrides = [f"collector.env_id={env_id}", f"collector.action_mask_key={KEY}"]
    for algorithm in ("ppo", "dqn"):
        config = load_config(overrides=[f"algorithm={algorithm}", *overrides])
        observation_space, _ = env_spaces(config)
        assert KEY not in observation_space.spaces and "agent" in observation_space.spaces
    spec = model_spec_for(config)  # DQN over the multi-input encoder
    dqn = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    envs = make_vector_env(env_id, 4, action_mask_key=KEY)
    worker = RolloutWorker(envs, dqn, [1, 2, 3, 4], n_step=2, action_mask_key=KEY)
    for epsilon in (1.0, 0.0):
        columns = worker.rollout(60, {"epsilon": epsilon}, 0).transitions
        assert {"observation.agent", "next_observation.goal", KEY, "next_action_mask"} <= set(
            columns
        )
        assert "observation" not in columns and (columns["action"] != 1).all()
    assert worker.masks.invalid_actions == 0
    config = load_config(overrides=["algorithm=ppo", *overrides])
    spec = model_spec_for(config)
    ppo = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    envs = make_vector_env(env_id, 4, action_mask_key=KEY, autoreset="same_step")
    worker = OnPolicyWorker(envs, ppo, [1, 2, 3, 4], OnPolicyTransform(), action_mask_key=KEY)
    batch = worker.rollout(50, {}, 0)
    assert batch.invalid_actions == 0 and (batch.transitions["action"] != 1).all()
    assert batch.transitions[KEY].shape == (200, 3) and "observation.noise" in batch.transitions
