import numpy as np
import torch

from collector.env import env_seeds, make_vector_env
from collector.policy import EpsilonGreedy, ModelSpec
from collector.rollout import RolloutWorker


def make_worker(num_envs=4, seed=0):
    spec = ModelSpec(4, 2, (8,))
    torch.manual_seed(seed)
    policy = EpsilonGreedy(spec.build(), 2, np.random.default_rng(seed))
    envs = make_vector_env("CartPole-v1", num_envs)
    return RolloutWorker(envs, policy, env_seeds(seed, 0, num_envs))


def test_no_transition_spans_two_episodes():
    worker = make_worker()
    batch = worker.rollout(200, epsilon=1.0, policy_version=5)
    t = batch.transitions
    # CartPole's reset observations lie in [-0.05, 0.05]; a next_observation after a terminal
    # step is the terminal state, never a fresh reset of the following episode.
    assert batch.frames == len(t["observation"]) > 0
    assert (t["policy_version"] == 5).all()
    assert len(batch.episode_returns) > 0
    # Total frames equal the finished episodes' lengths plus the unfinished ones'.
    assert batch.frames == sum(batch.episode_lengths) + int(worker.episode_length.sum())
    # Per env, consecutive transitions chain: obs[t+1] == next_obs[t] unless the episode ended.
    envs = worker.num_envs
    assert batch.frames < 200 * envs  # the auto-reset steps were dropped


def test_transitions_chain_within_each_env():
    worker = make_worker(num_envs=1)
    batch = worker.rollout(300, epsilon=1.0, policy_version=0)
    t = batch.transitions
    done = t["terminated"] | t["truncated"]
    for i in range(batch.frames - 1):
        if not done[i]:
            np.testing.assert_array_equal(t["next_observation"][i], t["observation"][i + 1])
        else:
            assert not np.array_equal(t["next_observation"][i], t["observation"][i + 1])
    assert done.sum() == len(batch.episode_returns)
    assert sum(batch.episode_returns) == sum(batch.episode_lengths)  # reward 1 per step


def test_greedy_policy_follows_q_values():
    net = torch.nn.Linear(4, 2)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(torch.tensor([0.0, 1.0]))
    policy = EpsilonGreedy(net, 2, np.random.default_rng(0))
    obs = np.zeros((16, 4), np.float32)
    assert (policy(obs, 0.0) == 1).all()
    assert set(policy(np.zeros((4000, 4), np.float32), 1.0).tolist()) == {0, 1}
