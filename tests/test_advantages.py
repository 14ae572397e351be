import numpy as np

from collector.advantages import gae, returns_to_go


def test_gae_on_an_episode_with_a_truncation_and_a_termination():
    # One env, 5 steps: step 1 is truncated (bootstraps from the truncated state's value 10),
    # step 3 terminates (no bootstrap), step 4 is cut by the rollout's end (bootstraps V(s_5)).
    gamma, lam = 0.9, 0.5
    reward = np.array([1.0, 2.0, 3.0, 4.0, 5.0])[:, None]
    value = np.array([0.5, 1.0, 1.5, 2.0, 2.5])[:, None]
    next_value = np.array([1.0, 10.0, 2.0, 99.0, 3.0])[:, None]  # 99: unused at a termination
    terminated = np.array([False, False, False, True, False])[:, None]
    truncated = np.array([False, True, False, False, False])[:, None]
    advantage, target = gae(reward, value, next_value, terminated, truncated, gamma=gamma, lam=lam)
    delta = [
        1.0 + 0.9 * 1.0 - 0.5,  # 1.4
        2.0 + 0.9 * 10.0 - 1.0,  # 10.0 (truncation: bootstrap)
        3.0 + 0.9 * 2.0 - 1.5,  # 3.3
        4.0 - 2.0,  # 2.0 (termination: no bootstrap)
        5.0 + 0.9 * 3.0 - 2.5,  # 5.2
    ]
    expected = [
        delta[0] + 0.45 * delta[1],  # the recursion stops after the truncated step
        delta[1],
        delta[2] + 0.45 * delta[3],
        delta[3],
        delta[4],
    ]
    np.testing.assert_allclose(advantage[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(target[:, 0], np.array(expected) + value[:, 0], rtol=1e-6)
    assert advantage.dtype == np.float32


def test_gae_with_lambda_one_is_the_n_step_return_to_the_rollout_end():
    reward = np.ones((3, 2))
    value = np.zeros((3, 2))
    next_value = np.array([[0.0, 0.0], [0.0, 0.0], [4.0, 4.0]])  # V(s_{t+1}); V(s_3) = 4
    done = np.zeros((3, 2), bool)
    _, target = gae(reward, value, next_value, done, done, gamma=0.5, lam=1.0)
    # 1 + 0.5 + 0.25 + 0.125 * V(s_3) = 2.25; then 1 + 0.5 + 0.25 * 4 = 2.5; then 1 + 0.5 * 4
    np.testing.assert_allclose(target[:, 0], [2.25, 2.5, 3.0])


def test_returns_to_go_of_complete_episodes():
    gamma = 0.5
    # Env 0: an episode of 3 steps that terminates, then one of 2 steps that is truncated.
    reward = np.array([1.0, 2.0, 4.0, 8.0, 16.0])[:, None]
    terminated = np.array([False, False, True, False, False])[:, None]
    truncated = np.array([False, False, False, False, True])[:, None]
    plain = returns_to_go(reward, terminated, truncated, gamma=gamma)
    np.testing.assert_allclose(plain[:, 0], [1 + 1 + 1, 2 + 2, 4, 8 + 8, 16])
    bootstrap = np.zeros((5, 1))
    bootstrap[4, 0] = 32.0  # V of the truncated state: G_4 = 16 + 0.5 * 32
    boot = returns_to_go(reward, terminated, truncated, gamma=gamma, bootstrap=bootstrap)
    np.testing.assert_allclose(boot[:, 0], [3, 4, 4, 8 + 0.5 * 32, 32])
