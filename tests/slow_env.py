"""A CartPole whose first reset is slow: an evaluator that falls behind training (tests)."""

import time

import gymnasium as gym


class _SlowFirstReset(gym.Wrapper):
    def __init__(self, env: gym.Env, first_reset_s: float) -> None:
        super().__init__(env)
        self.delay_s = first_reset_s

    def reset(self, **kwargs):
        delay, self.delay_s = self.delay_s, 0.0
        time.sleep(delay)  # the simulated cost of a slow environment, not a wait
        return self.env.reset(**kwargs)


def make(first_reset_s: float = 5.0) -> gym.Env:
    """CartPole-v1 whose first ``reset`` takes ``first_reset_s`` seconds."""
    return _SlowFirstReset(gym.make("CartPole-v1"), first_reset_s)
