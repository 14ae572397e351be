"""Connect Four against a uniformly random opponent: a single-agent env with an action mask.

PettingZoo's ``connect_four_v3`` (the ``marl`` extra: ``pip install "relayrl[marl]"``; the
classic game needs nothing but pettingzoo) seen from one player, the learner: each ``step`` plays
the learner's column, then, unless the game ended, the opponent's reply, drawn uniformly among
its legal columns with the env's own seeded generator. Env id (a factory path, as every env of
relayrl's own): ``collector.envs.connect4:connect_four``.

* Observation: ``Dict(observation=Box(0, 1, (84,), float32), action_mask=Box(0, 1, (7,), int8))``:
  the board from the learner's side (PettingZoo's ``[6, 7, 2]`` planes, own pieces first,
  flattened for the MLP networks) and the columns that are not full. Run it with
  ``collector.action_mask_key: action_mask``: the mask leaves the observation
  (``collector.envs.masks``) and the networks see the 84-wide ``Box``.
* Reward: +1 for a win, -1 for a loss, 0 for a draw (at the game's end; 0 before). An illegal
  column (a full one: only possible without masking) ends the game as a loss (-1), as
  PettingZoo's ``TerminateIllegalWrapper`` does; ``info["illegal"]`` says so.
* Who moves first (``first``): ``learner`` (the default, and what the shipped configs and bench
  entries use), ``opponent``, or ``alternate`` (learner first in even episodes).
* ``info["outcome"]`` at a game's end: ``win``, ``loss`` or ``draw``.

Random against random, the first player wins about 55% of games (:func:`random_baseline`,
measured in ``docs/benchmarks.md``), which sets the bench entries' thresholds.

Examples:
    >>> env = connect_four()
    >>> obs, info = env.reset(seed=0)
    >>> obs["observation"].shape, obs["action_mask"].tolist()
    ((84,), [1, 1, 1, 1, 1, 1, 1])
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

FIRST = ("learner", "opponent", "alternate")
COLUMNS = 7


class ConnectFour(gym.Env):
    """See the module docstring.

    Args:
        first: ``learner``, ``opponent`` or ``alternate``.
    """

    metadata = {"render_modes": []}

    def __init__(self, first: str = "learner") -> None:
        if first not in FIRST:
            raise ValueError(f"first: must be one of {FIRST}, got {first!r}")
        try:
            from pettingzoo.classic import connect_four_v3
        except ImportError as err:
            raise ImportError(
                f'connect four needs pettingzoo: pip install "relayrl[marl]" ({err})'
            ) from None
        self.game = connect_four_v3.raw_env()
        self.first = first
        self.episodes = 0
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(0.0, 1.0, (6 * COLUMNS * 2,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (COLUMNS,), np.int8),
            }
        )
        self.action_space = gym.spaces.Discrete(COLUMNS)
        self.learner = "player_0"

    def _observe(self) -> dict[str, np.ndarray]:
        seen = self.game.observe(self.learner)
        return {
            "observation": seen["observation"].astype(np.float32).reshape(-1),
            "action_mask": seen["action_mask"].astype(np.int8),
        }

    def _opponent_moves(self) -> None:
        mask = self.game.observe(self.game.agent_selection)["action_mask"]
        self.game.step(int(self.np_random.choice(np.flatnonzero(mask))))

    def reset(self, *, seed=None, options=None):
        """Starts a game; the opponent has already replied when it moves first."""
        super().reset(seed=seed)
        self.game.reset(seed=None if seed is None else int(seed))
        learner_first = self.first == "learner" or (
            self.first == "alternate" and self.episodes % 2 == 0
        )
        self.episodes += 1
        self.learner = "player_0" if learner_first else "player_1"
        if not learner_first:
            self._opponent_moves()
        return self._observe(), {}

    def step(self, action):
        """Plays the learner's column, then the opponent's reply (see the module docstring)."""
        action = int(action)
        if not self.game.observe(self.learner)["action_mask"][action]:
            return self._observe(), -1.0, True, False, {"illegal": True, "outcome": "loss"}
        self.game.step(action)
        if not self._over():
            self._opponent_moves()
        if not self._over():
            return self._observe(), 0.0, False, False, {}
        reward = float(self.game.rewards[self.learner])
        outcome = "win" if reward > 0 else "loss" if reward < 0 else "draw"
        return self._observe(), reward, True, False, {"outcome": outcome}

    def _over(self) -> bool:
        return any(self.game.terminations.values()) or any(self.game.truncations.values())


def connect_four(first: str = "learner") -> ConnectFour:
    """The env factory: ``collector.env_id: collector.envs.connect4:connect_four``."""
    return ConnectFour(first)


def random_baseline(games: int = 2000, seed: int = 0, first: str = "learner") -> dict:
    """Win, loss and draw rates of a uniformly random learner (legal columns) against random.

    Examples:
        >>> rates = random_baseline(games=50)
        >>> round(rates["win"] + rates["loss"] + rates["draw"], 6)
        1.0
    """
    env = ConnectFour(first)
    rng = np.random.default_rng(seed)
    counts = {"win": 0, "loss": 0, "draw": 0}
    for game in range(games):
        obs, _ = env.reset(seed=seed * 100_003 + game)
        done = False
        while not done:
            action = rng.choice(np.flatnonzero(obs["action_mask"]))
            obs, _, done, _, info = env.step(action)
        counts[info["outcome"]] += 1
    return {k: v / games for k, v in counts.items()}
