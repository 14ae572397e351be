"""N-step transitions: hand-computed targets, rollout boundaries, episode boundaries."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from collector.envs.vector import env_seeds, make_vector_env
from collector.networks.q_mlp import ModelSpec
from collector.nstep import NStepBuffer
from collector.rollout import RolloutWorker


class ScriptedEnv(gym.Env):
    """Episodes of scripted lengths; observation ``[episode, t]``, reward ``t`` at step ``t``.

    Episode ``i`` lasts ``lengths[i % len(lengths)]`` steps and then terminates or truncates
    as ``endings`` says. The action is ignored.
    """

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, lengths=(3, 5), endings=("terminated", "truncated")):
        self.lengths = lengths
        self.endings = endings
        self.episode = -1
        self.t = 0

    def _obs(self):
        return np.array([self.episode, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        i = self.episode % len(self.lengths)
        end = self.t == self.lengths[i]
        terminated = end and self.endings[i] == "terminated"
        truncated = end and self.endings[i] == "truncated"
        return self._obs(), float(self.t), terminated, truncated, {}


def scripted_worker(n_step, gamma, num_envs=1, **env_kwargs):
    envs = make_vector_env(f"{__name__}:ScriptedEnv", num_envs, env_kwargs=env_kwargs)
    spec = ModelSpec(2, 2, (8,))
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    return RolloutWorker(envs, policy, list(range(num_envs)), n_step=n_step, gamma=gamma)


# Episode 0: 3 steps, terminated, rewards 1, 2, 3. Episode 1: 5 steps, truncated, rewards 1..5.
# n = 3, gamma = 0.5. Columns: obs, reward, next_obs, n_step_discount, terminated, truncated.
EXPECTED = [
    ((0, 0), 1 + 0.5 * 2 + 0.25 * 3, (0, 3), 0.125, True, False),
    ((0, 1), 2 + 0.5 * 3, (0, 3), 0.25, True, False),
    ((0, 2), 3, (0, 3), 0.5, True, False),
    ((1, 0), 1 + 0.5 * 2 + 0.25 * 3, (1, 3), 0.125, False, False),
    ((1, 1), 2 + 0.5 * 3 + 0.25 * 4, (1, 4), 0.125, False, False),
    ((1, 2), 3 + 0.5 * 4 + 0.25 * 5, (1, 5), 0.125, False, True),
    ((1, 3), 4 + 0.5 * 5, (1, 5), 0.25, False, True),
    ((1, 4), 5, (1, 5), 0.5, False, True),
]


def check_expected(t):
    assert len(t["reward"]) >= len(EXPECTED)
    for i, (obs, ret, next_obs, discount, terminated, truncated) in enumerate(EXPECTED):
        assert tuple(t["observation"][i]) == obs
        assert t["reward"][i] == pytest.approx(ret)
        assert tuple(t["next_observation"][i]) == next_obs
        assert t["n_step_discount"][i] == pytest.approx(discount)
        assert bool(t["terminated"][i]) is terminated
        assert bool(t["truncated"][i]) is truncated


def test_n_step_targets_match_a_hand_computed_episode():
    worker = scripted_worker(n_step=3, gamma=0.5)
    # 3 steps + 1 auto-reset step + 5 steps + 1 auto-reset, then 2 more so every window of
    # episode 1 is complete.
    batch = worker.rollout(12, explore=1.0, policy_version=7)
    t = batch.transitions
    check_expected(t)
    assert batch.episode_returns == [6.0, 15.0]
    assert batch.episode_lengths == [3, 5]
    assert (t["policy_version"] == 7).all()


def test_rollout_boundaries_do_not_cut_windows():
    worker = scripted_worker(n_step=3, gamma=0.5)
    parts = [worker.rollout(k, explore=1.0, policy_version=k) for k in (1, 2, 1, 4, 4)]
    t = {key: np.concatenate([p.transitions[key] for p in parts]) for key in parts[0].transitions}
    check_expected(t)
    # Each transition keeps the version of the policy that chose its first action (step 3
    # only auto-reset the env, so it starts no transition).
    assert t["policy_version"].tolist()[:8] == [1, 2, 2, 4, 4, 4, 4, 4]
    assert len(worker.nstep) == 2  # the last n - 1 steps' windows wait for the next rollout


def test_one_step_transitions_discount_by_gamma():
    worker = scripted_worker(n_step=1, gamma=0.9)
    t = worker.rollout(5, explore=1.0, policy_version=0).transitions
    assert t["reward"].tolist() == [1, 2, 3, 1]  # step 4 only auto-reset the env
    assert t["next_observation"][:, 1].tolist() == [1, 2, 3, 1]
    assert np.allclose(t["n_step_discount"], 0.9)
    assert t["terminated"].tolist() == [False, False, True, False]


def test_chunked_rollouts_equal_one_long_rollout():
    def collect(chunks):
        spec = ModelSpec(4, 2, (8,))
        torch.manual_seed(0)
        policy = spec.make_policy(spec.build(), np.random.SeedSequence(3))
        envs = make_vector_env("CartPole-v1", 3)
        worker = RolloutWorker(envs, policy, env_seeds(0, 0, 3), n_step=4, gamma=0.9)
        parts = [worker.rollout(k, explore=0.5, policy_version=0) for k in chunks]
        return {k: np.concatenate([p.transitions[k] for p in parts]) for k in parts[0].transitions}

    whole = collect([150])
    chunked = collect([1, 7, 3, 50, 2, 87])
    assert len(whole["reward"]) > 400
    for key, value in whole.items():
        np.testing.assert_array_equal(chunked[key], value, err_msg=key)


def test_no_window_spans_two_episodes_under_autoreset():
    worker = scripted_worker(
        n_step=4, gamma=0.9, num_envs=3, lengths=(2, 7, 1, 4), endings=("truncated",) * 4
    )
    frames = 0
    lengths = []
    for _ in range(10):
        batch = worker.rollout(9, explore=1.0, policy_version=0)
        t = batch.transitions
        frames += batch.frames
        lengths += batch.episode_lengths
        same_episode = t["next_observation"][:, 0] == t["observation"][:, 0]
        assert same_episode.all()
        steps = t["next_observation"][:, 1] - t["observation"][:, 1]
        assert ((steps >= 1) & (steps <= 4)).all()
        np.testing.assert_allclose(t["n_step_discount"], 0.9**steps)
    assert set(lengths) == {2, 7, 1, 4}
    # Every real step is either written or waiting in an open window: nothing is lost.
    pending_valid = int(worker.nstep.pending["valid"].sum())
    assert frames + pending_valid == sum(lengths) + int(
        worker.episodes_tracker.episode_length.sum()
    )


def test_buffer_validates_its_arguments():
    with pytest.raises(ValueError, match="n_step"):
        NStepBuffer(0, 0.9)
    with pytest.raises(ValueError, match="gamma"):
        NStepBuffer(3, 1.5)
