"""On-policy rollouts: exact sizes, bootstrapped truncations, whole episodes (no Ray)."""

import numpy as np
import torch

from collector.advantages import gae
from collector.envs.vector import make_vector_env
from collector.networks.actor_critic import ActorCriticSpec
from collector.onpolicy import OnPolicyTransform, OnPolicyWorker

SCRIPTED = "tests.test_collector_nstep:ScriptedEnv"


class ConstantValue:
    """Wraps an actor-critic policy but reports the critic value ``10 * t`` of ``[episode, t]``."""

    def __init__(self, policy):
        self.policy = policy

    def act(self, obs, explore):
        actions, extras = self.policy.act(obs, explore)
        extras["value"] = (10.0 * obs[:, 1]).astype(np.float32)
        return actions, extras

    def value(self, obs):
        return (10.0 * obs[:, 1]).astype(np.float32)


def worker(env_id, num_envs, transform, *, scripted_values=False, **env_kwargs):
    spec = ActorCriticSpec(2 if env_id == SCRIPTED else 4, 2, hidden_sizes=(8,))
    torch.manual_seed(0)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    if scripted_values:
        policy = ConstantValue(policy)
    envs = make_vector_env(env_id, num_envs, env_kwargs=env_kwargs, autoreset="same_step")
    return OnPolicyWorker(envs, policy, list(range(num_envs)), transform)


def test_fixed_length_rollouts_yield_exactly_steps_times_envs():
    w = worker("CartPole-v1", 3, OnPolicyTransform("gae", gamma=0.99, gae_lambda=0.95))
    total_episode_frames = 0
    for version in range(4):
        batch = w.rollout(50, {}, policy_version=version)
        t = batch.transitions
        assert batch.frames == 150
        assert (t["policy_version"] == version).all()
        assert set(t) >= {"observation", "action", "log_prob", "value", "advantage"}
        np.testing.assert_allclose(t["value_target"], t["advantage"] + t["value"], rtol=1e-5)
        total_episode_frames += sum(batch.episode_lengths)
    # Every frame belongs to a finished episode or to one still running: none is lost.
    assert total_episode_frames + w.episodes_tracker.episode_length.sum() == 600


def test_truncations_bootstrap_from_the_final_state_and_terminations_do_not():
    # Episodes of 3 (terminated) and 5 (truncated) steps; V([episode, t]) = 10 t; reward t.
    w = worker(
        SCRIPTED,
        1,
        OnPolicyTransform("gae", gamma=0.5, gae_lambda=1.0),
        scripted_values=True,
        lengths=(3, 5),
        endings=("terminated", "truncated"),
    )
    t = w.rollout(9, {}, policy_version=0).transitions
    obs = t["observation"]
    assert obs[:, 1].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0]  # SAME_STEP: every step counts
    # Rebuild the expected targets: step 2 terminates, step 7 truncates at t=5 (V = 50), the
    # rollout ends after step 8 in state [2, 1] (V = 10).
    reward = t["reward"][:, None].astype(np.float64)
    value = t["value"][:, None].astype(np.float64)
    next_value = np.array([10, 20, 0, 10, 20, 30, 40, 50, 10], dtype=np.float64)[:, None]
    adv, _ = gae(
        reward,
        value,
        next_value,
        t["terminated"][:, None],
        t["truncated"][:, None],
        gamma=0.5,
        lam=1.0,
    )
    np.testing.assert_allclose(t["advantage"], adv[:, 0], rtol=1e-5)
    # By hand: the truncated step 7 (reward 5, t=4) bootstraps 0.5 * 50 from the final state.
    assert t["advantage"][7] == np.float32(5 + 0.5 * 50 - 40)
    assert t["advantage"][2] == np.float32(3 - 20)  # terminated: reward 3 minus V(t=2) = 20


def test_whole_episode_rollouts_run_one_complete_episode_per_env():
    w = worker(
        SCRIPTED,
        2,
        OnPolicyTransform("episodes", gamma=0.5, baseline=False),
        lengths=(3, 5),
        endings=("terminated", "terminated"),
    )
    batch = w.rollout(1, {}, policy_version=2, seeds=[5, 6])
    t = batch.transitions
    # Each env resets and runs one episode: env 0's first episode is its episode 1 after the
    # constructor's reset (length 5), the same for env 1.
    assert sorted(batch.episode_lengths) == [5, 5]
    assert batch.frames == 10 == sum(batch.episode_lengths)
    assert t["terminated"].sum() == 2
    # Returns-to-go of rewards 1..5 with gamma 0.5 from each step; no baseline: advantage = G.
    g = [1 + 0.5 * (2 + 0.5 * (3 + 0.5 * (4 + 0.5 * 5))), 2 + 0.5 * (3 + 0.5 * (4 + 2.5)), 0, 0, 5]
    g[2] = 3 + 0.5 * (4 + 0.5 * 5)
    g[3] = 4 + 0.5 * 5
    ordered = np.array(sorted(zip(t["observation"][:, 1], t["value_target"], strict=True)))
    np.testing.assert_allclose(ordered[::2, 1], g, rtol=1e-6)
    np.testing.assert_allclose(t["advantage"], t["value_target"])
    again = w.rollout(1, {}, policy_version=3, seeds=[5, 6])
    # Fresh resets: episode 3 (episode 2 was begun by the auto-reset and is never stored).
    assert sorted(again.episode_lengths) == [5, 5]
    assert set(again.transitions["observation"][:, 0]) == {3.0}
