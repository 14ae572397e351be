import numpy as np
import pytest
import torch

from collector.envs.vector import env_seeds, make_vector_env
from collector.networks.actor_critic import ActorCriticSpec
from collector.networks.q_mlp import EpsilonGreedy, ModelSpec
from collector.rollout import RolloutWorker


def make_worker(num_envs=4, seed=0):
    spec = ModelSpec(4, 2, (8,))
    torch.manual_seed(seed)
    policy = EpsilonGreedy(spec.build(), 2, np.random.default_rng(seed))
    envs = make_vector_env("CartPole-v1", num_envs)
    return RolloutWorker(envs, policy, env_seeds(seed, 0, num_envs))


def test_no_transition_spans_two_episodes():
    worker = make_worker()
    batch = worker.rollout(200, explore=1.0, policy_version=5)
    t = batch.transitions
    # CartPole's reset observations lie in [-0.05, 0.05]; a next_observation after a terminal
    # step is the terminal state, never a fresh reset of the following episode.
    assert batch.frames == len(t["observation"]) > 0
    assert (t["policy_version"] == 5).all()
    assert len(batch.episode_returns) > 0
    # Total frames equal the finished episodes' lengths plus the unfinished ones'.
    assert batch.frames == sum(batch.episode_lengths) + int(
        worker.episodes_tracker.episode_length.sum()
    )
    # Per env, consecutive transitions chain: obs[t+1] == next_obs[t] unless the episode ended.
    envs = worker.num_envs
    assert batch.frames < 200 * envs  # the auto-reset steps were dropped


def test_transitions_chain_within_each_env():
    worker = make_worker(num_envs=1)
    batch = worker.rollout(300, explore=1.0, policy_version=0)
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


def test_episode_statistics_carry_across_rollouts():
    worker = make_worker(num_envs=3)
    returns, lengths = [], []
    for steps in (5, 1, 40, 13, 60):
        batch = worker.rollout(steps, explore=1.0, policy_version=0)
        returns += batch.episode_returns
        lengths += batch.episode_lengths
    assert len(lengths) >= 3
    assert returns == [float(n) for n in lengths]  # CartPole pays 1 per step
    assert min(lengths) >= 8  # no episode split in two at a rollout boundary
    assert worker.episodes == len(lengths)


def test_async_vector_env_and_env_kwargs():
    envs = make_vector_env("CartPole-v1", 2, mode="async", env_kwargs={"max_episode_steps": 5})
    spec = ModelSpec(4, 2, (8,))
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    worker = RolloutWorker(envs, policy, env_seeds(0, 0, 2))
    try:
        batch = worker.rollout(12, explore=0.0, policy_version=0)
    finally:
        envs.close()
    assert max(batch.episode_lengths) <= 5
    assert batch.transitions["truncated"].sum() >= 2


def test_factory_paths_are_resolved_or_refused():
    envs = make_vector_env("gymnasium.envs.classic_control:CartPoleEnv", 2)
    assert envs.num_envs == 2
    with pytest.raises(ValueError, match="cannot import"):
        make_vector_env("no_such_module_xyz:make", 1)
    with pytest.raises(ValueError, match="no callable"):
        make_vector_env("gymnasium:no_such_factory", 1)


def test_categorical_actor_stores_log_probs_and_values():
    spec = ActorCriticSpec(obs_dim=4, action_dim=2, distribution="categorical")
    torch.manual_seed(0)
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    worker = RolloutWorker(make_vector_env("CartPole-v1", 4), policy, env_seeds(0, 0, 4))
    t = worker.rollout(50, explore=0.0, policy_version=0).transitions
    obs = torch.as_tensor(t["observation"])
    with torch.no_grad():
        logits, values = network(obs)
    dist = torch.distributions.Categorical(logits=logits)
    expected = dist.log_prob(torch.as_tensor(t["action"]))
    np.testing.assert_allclose(t["log_prob"], expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t["value"], values.numpy(), rtol=1e-5, atol=1e-6)
    assert set(np.unique(t["action"])) == {0, 1}


@pytest.mark.parametrize("squash", [False, True])
def test_gaussian_actor_log_probs_match_torch_distributions(squash):
    spec = ActorCriticSpec(obs_dim=3, action_dim=1, distribution="gaussian", squash=squash)
    torch.manual_seed(0)
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(1))
    worker = RolloutWorker(make_vector_env("Pendulum-v1", 2), policy, env_seeds(0, 0, 2))
    t = worker.rollout(30, explore=0.0, policy_version=0).transitions
    with torch.no_grad():
        mean, values = network(torch.as_tensor(t["observation"]))
    dist = torch.distributions.Normal(mean, network.log_std.detach().exp())
    actions = torch.as_tensor(t["action"])
    if squash:
        assert actions.abs().max() < 1
        dist = torch.distributions.TransformedDistribution(
            dist, [torch.distributions.TanhTransform(cache_size=1)]
        )
        actions = actions.clamp(-1 + 1e-6, 1 - 1e-6)
    expected = dist.log_prob(actions).sum(-1)
    np.testing.assert_allclose(t["log_prob"], expected.numpy(), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(t["value"], values.numpy(), rtol=1e-5, atol=1e-6)
    assert t["action"].shape == (60, 1)


def test_stochastic_actor_rng_state_round_trips():
    spec = ActorCriticSpec(obs_dim=4, action_dim=3)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    obs = np.zeros((64, 4), np.float32)
    state = policy.state_dict()
    first = policy.act(obs)[0]
    policy.load_state_dict(state)
    np.testing.assert_array_equal(policy.act(obs)[0], first)
    with pytest.raises(ValueError, match="distribution"):
        ActorCriticSpec(obs_dim=4, action_dim=3, distribution="beta")
