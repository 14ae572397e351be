"""Atari environments with the standard DQN preprocessing (gymnasium + ``ale-py``).

``make_atari`` is an env factory: name it in a config as ``collector.env_id:
collector.atari:make_atari`` with the game in ``env_kwargs``::

    collector:
      env_id: collector.atari:make_atari
      env_kwargs: {game: ALE/Pong-v5}
      frame_skip: 4          # frames are counted in emulator frames, as for every env

The wrappers, in order (Mnih et al., 2015; Machado et al., 2018 for the settings):

* the raw ALE env with no frame skip of its own and sticky actions off (``repeat_action_
  probability``, 0.25 in the v5 defaults, is an argument);
* gymnasium's ``AtariPreprocessing``: up to ``noop_max`` no-op actions after reset, ``frame_skip``
  repeats of each action with the maximum over the last two frames, 84x84 grayscale uint8;
* :class:`EpisodicLife` (training only): a lost life ends the episode for the learner
  (``terminated``), while the emulator resets only when the game is over;
* reward clipping to its sign (training only);
* ``FrameStackObservation``: the last ``frame_stack`` frames, ``[4, 84, 84]`` uint8; the first
  observation of an episode repeats the reset frame.

Episode returns reported by collectors are therefore clipped, per-life returns while training
(for Pong, which has no lives and rewards of +-1, they equal the game's score).

The ``atari`` extra (``pip install "relayrl[atari]"``) installs ``ale-py`` (ROMs included) and
``opencv-python-headless`` (resizing); without it :func:`make_atari` raises
:class:`MissingExtraError`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

EXTRA_HINT = 'the atari extra is not installed: pip install "relayrl[atari]"'


class MissingExtraError(ImportError):
    """An optional dependency of the Atari envs is missing; the message names the extra."""


def _require_ale():
    try:
        import ale_py
        import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
    except ImportError as err:
        raise MissingExtraError(f"{EXTRA_HINT} ({err})") from None
    gym.register_envs(ale_py)
    return ale_py


class EpisodicLife(gym.Wrapper):
    """Ends the learner's episode at each lost life; resets the emulator only at game over.

    After a life-loss termination, ``reset`` continues the same game with one no-op step
    instead of a fresh game, so every life is an episode while games stay whole.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        """Steps and turns a lost life into ``terminated``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        """A fresh game after game over; otherwise one no-op step of the current game."""
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class ClipReward(gym.RewardWrapper):
    """Clips each reward to its sign, ``{-1, 0, +1}``."""

    def reward(self, reward):
        """The sign of ``reward``."""
        return float(np.sign(reward))


def make_atari(
    game: str = "ALE/Pong-v5",
    *,
    frame_skip: int = 4,
    frame_stack: int = 4,
    noop_max: int = 30,
    screen_size: int = 84,
    episodic_life: bool = True,
    clip_rewards: bool = True,
    repeat_action_probability: float = 0.0,
    max_episode_steps: int | None = 108_000 // 4,
    render_mode: str | None = None,
) -> gym.Env:
    """One Atari env with the DQN preprocessing (see the module docstring).

    Args:
        game: An ALE id, e.g. ``"ALE/Pong-v5"``.

    Keyword Args:
        frame_skip: Emulator frames per agent step (max-pooled over the last two).
        frame_stack: Frames per observation.
        noop_max: Most no-op actions after a reset.
        screen_size: Side of the square grayscale frame.
        episodic_life: A lost life ends the episode (training).
        clip_rewards: Rewards clipped to their sign (training).
        repeat_action_probability: Sticky-action probability of the emulator.
        max_episode_steps: Agent steps before truncation (27,000 agent steps: 30 minutes of
            play at 60 Hz); None: no limit.
        render_mode: The emulator's render mode (``rgb_array`` for videos of the game).

    Returns:
        The env; observations are ``[frame_stack, screen_size, screen_size]`` uint8.

    Raises:
        MissingExtraError: Without ``ale-py`` or ``opencv-python-headless``.
    """
    _require_ale()
    env = gym.make(
        game,
        frameskip=1,
        repeat_action_probability=repeat_action_probability,
        full_action_space=False,
        max_episode_steps=None if max_episode_steps is None else max_episode_steps * frame_skip,
        render_mode=render_mode,
    )
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size
    )
    if episodic_life:
        env = EpisodicLife(env)
    if clip_rewards:
        env = ClipReward(env)
    return gym.wrappers.FrameStackObservation(env, frame_stack)
