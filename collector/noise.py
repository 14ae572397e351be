"""Temporally correlated (colored) Gaussian noise for exploration in continuous action spaces.

Eberhard et al. (ICLR 2023, "Pink Noise Is All You Need: Colored Noise Exploration in Deep
Reinforcement Learning") replace the white Gaussian noise of an off-policy actor's samples with
colored noise: a sequence whose power spectral density falls as ``1 / f ** beta`` (white:
``beta = 0``; pink: ``1``; red, Brownian: ``2``). Each step's value is still a standard normal
draw, so the actor's marginal action distribution is unchanged, but consecutive steps are
correlated, which reaches states that independent noise does not: on MountainCarContinuous-v0
a uniform random policy never reaches the goal, a pink one in most episodes.

:class:`ColoredNoise` draws, per env, a sequence of ``horizon`` steps by shaping white noise in
the frequency domain (the method of Timmer and Koenig, 1995, as the paper's ``pink`` package
does), normalizes it to unit variance, hands out one step per call and draws the next sequence
when one is used up. ``horizon`` sets the lowest frequency, ``1 / horizon``; the paper uses the
episode length.

Examples:
    >>> noise = ColoredNoise(beta=1.0, horizon=1000, seed=np.random.SeedSequence(0))
    >>> steps = np.stack([noise.sample(2, 1) for _ in range(1000)])
    >>> steps.shape, round(float(steps.std()), 1)
    ((1000, 2, 1), 1.0)
    >>> lag1 = np.corrcoef(steps[:-1, 0, 0], steps[1:, 0, 0])[0, 1]
    >>> bool(lag1 > 0.5)  # pink: neighbours are strongly correlated (white: about 0)
    True
"""

from __future__ import annotations

import numpy as np

COLORS = {"white": 0.0, "pink": 1.0, "red": 2.0}


def colored_sequences(
    beta: float, horizon: int, shape: tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """Unit-variance Gaussian sequences with power spectrum ``1 / f ** beta``.

    Args:
        beta: The spectrum's exponent (0 white, 1 pink, 2 red).
        horizon: Steps per sequence (the last axis).
        shape: Leading shape, e.g. ``(num_envs, action_dim)``.
        rng: Source of the white noise.

    Returns:
        float32 ``[*shape, horizon]``.
    """
    frequencies = np.fft.rfftfreq(horizon)
    frequencies[0] = frequencies[1]  # no infinite power at f = 0
    scale = frequencies ** (-beta / 2.0)
    size = (*shape, len(frequencies))
    spectrum = (rng.standard_normal(size) + 1j * rng.standard_normal(size)) * scale
    sequences = np.fft.irfft(spectrum, n=horizon, axis=-1)
    sequences /= sequences.std(axis=-1, keepdims=True) + 1e-8
    return sequences.astype(np.float32)


class ColoredNoise:
    """One colored noise sequence per env and action dimension, one step per :meth:`sample`.

    Args:
        beta: The spectrum's exponent (0 white, 1 pink, 2 red).
        horizon: Steps per sequence.
        seed: Seeds the generator.
    """

    def __init__(self, beta: float, horizon: int, seed: np.random.SeedSequence) -> None:
        if beta < 0 or horizon < 2:
            raise ValueError(f"beta must be >= 0 and horizon >= 2, got {beta}, {horizon}")
        self.beta = beta
        self.horizon = horizon
        self.rng = np.random.default_rng(seed)
        self.buffer = np.zeros((0, 0, horizon), dtype=np.float32)
        self.position = horizon

    def sample(self, num_envs: int, action_dim: int) -> np.ndarray:
        """The next step's noise, float32 ``[num_envs, action_dim]``."""
        if self.buffer.shape[:2] != (num_envs, action_dim) or self.position >= self.horizon:
            shape = (num_envs, action_dim)
            self.buffer = colored_sequences(self.beta, self.horizon, shape, self.rng)
            self.position = 0
        step = self.buffer[:, :, self.position]
        self.position += 1
        return step

    def state_dict(self) -> dict:
        """The generator, the current sequences and the position in them."""
        return {
            "rng": self.rng.bit_generator.state,
            "buffer": self.buffer.copy(),
            "position": self.position,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores what :meth:`state_dict` returned."""
        self.rng.bit_generator.state = state["rng"]
        self.buffer = np.asarray(state["buffer"], dtype=np.float32)
        self.position = int(state["position"])


def policy_noise(beta: float, horizon: int, seed: np.random.SeedSequence) -> ColoredNoise | None:
    """A policy's colored noise, seeded from a child of its ``seed``; None for white noise."""
    return ColoredNoise(beta, horizon, seed.spawn(1)[0]) if beta > 0 else None
