"""The pure sequence core of recurrent off-policy learning (recurrent DQN, R2D2; no Ray).

With ``replay.sequence_length`` the off-policy collectors act with a recurrent policy
(``collector.networks.stepping.RecurrentPolicy``), keep one state per env (zeros at every
episode's first step) and write sequences instead of n-step transitions. One item is ``L``
consecutive steps of one env::

    observation      [L + 1, ...]  o_0 .. o_L; o_k follows the last real step k - 1 (the
                                   bootstrap state, or the final state of the episode)
    action, reward, terminated, truncated, valid   [L]
    recurrent_state  [state_size]  the state before step 0 (zeros at an episode's first step)
    burn_in          ()            steps that only advance the state (``replay.burn_in``)
    policy_version   ()            the model version that acted at step 0

A sequence never crosses an episode boundary: the step that ends an episode ends its sequence,
padded to ``L`` steps with ``valid = False`` (zeros), and the next episode starts a new one.
Within an episode, consecutive sequences overlap by ``overlap`` steps (a full sequence's last
``overlap`` steps start the next one). Sequences stay open across rollouts; a rollout's frames
are the steps its items add, each step counted once however many sequences hold it.

The envs run in gymnasium's ``NEXT_STEP`` autoreset mode: the step after an episode's end only
resets its env, is stored nowhere, and the state is zeroed before the new episode's first step.

With ``frame_stack`` (``replay.frame_stack``: stacked pixel observations ``[S, H, W]``) an item
holds ``observation_frames [L + S, H, W]``, each frame of its stacks once, instead of
``observation`` (``replay.sequence_frames``; the learner rebuilds the stacks).
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import torch

from collector.envs.episodes import CountsEpisodes, EpisodeTracker
from collector.rollout import RolloutBatch
from replay.sequence_frames import FRAMES_COLUMN, encode_sequence_frames
from replay.wire.sequences import NEW_STEPS


@dataclasses.dataclass(frozen=True)
class SequenceLayout:
    """What the collectors' sequences look like (``replay.sequence_*``, ``replay.burn_in``).

    Attributes:
        length: Steps per sequence.
        overlap: Steps consecutive sequences of an episode share.
        burn_in: Steps of each sequence that only advance the learner's state.
        frame_stack: Frames per stacked pixel observation stored once per item
            (``replay.frame_stack``; 0: observations stored whole).
    """

    length: int
    overlap: int = 0
    burn_in: int = 0
    frame_stack: int = 0


class SequenceWorker(CountsEpisodes):
    """Steps a ``NEXT_STEP`` vector env with a recurrent policy into overlapping sequences.

    Args:
        envs: A gymnasium vector env in ``NEXT_STEP`` autoreset mode (array observations).
        policy: Has ``initial_state(n)`` and ``act(obs, explore, state=) -> (actions, extras,
            next_state)`` (``collector.networks.stepping.RecurrentPolicy``).
        seeds: One reset seed per sub-env.

    Keyword Args:
        length: Steps per sequence ``L``.
        overlap: Steps consecutive sequences of an episode share.
        burn_in: Stored with every item (the learner's burn-in steps).
        frame_stack: ``S >= 2`` stores each item's stacked observations ``[S, H, W]`` as
            their unique frames (``observation_frames``, ``replay.sequence_frames``); 0 stores
            ``observation`` whole.
        new_steps: Also give each item its ``new_steps`` (int64: the steps no earlier item
            holds), which an external actor sends so the run counts each step once
            (:mod:`replay.wire.sequences`; not a replay column).

    Examples:
        >>> import gymnasium as gym
        >>> from collector.envs.spaces import describe
        >>> from collector.envs.vector import make_vector_env
        >>> from collector.networks.recurrent import RecurrentQSpec
        >>> spec = RecurrentQSpec(describe(gym.spaces.Box(-1, 1, (4,))), num_actions=2,
        ...                       recurrent="gru", recurrent_hidden_size=8)
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> worker = SequenceWorker(make_vector_env("CartPole-v1", 2), policy, [1, 2],
        ...                         length=8, overlap=4)
        >>> batch = worker.rollout(num_steps=40, explore=1.0, policy_version=0)
        >>> batch.transitions["observation"].shape[1:], batch.transitions["valid"].shape[1:]
        ((9, 4), (8,))
        >>> batch.frames == int(worker.written_steps)
        True
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        policy,
        seeds: list[int],
        *,
        length: int,
        overlap: int = 0,
        burn_in: int = 0,
        frame_stack: int = 0,
        new_steps: bool = False,
    ) -> None:
        if length < 2 or not 0 <= overlap < length or not 0 <= burn_in < length:
            raise ValueError(
                f"replay.sequence_length: must be >= 2 with 0 <= sequence_overlap, burn_in < it, "
                f"got length={length}, overlap={overlap}, burn_in={burn_in}"
            )
        if frame_stack == 1 or frame_stack < 0:
            raise ValueError(
                f"replay.frame_stack: 0 (off) or the observations' frame stack >= 2 with "
                f"sequences, got {frame_stack}"
            )
        self.frame_stack = frame_stack
        self.envs = envs
        self.policy = policy
        self.num_envs = envs.num_envs
        self.length, self.overlap, self.burn_in = length, overlap, burn_in
        self.marks_new_steps = new_steps
        self.episodes_tracker = EpisodeTracker(self.num_envs)
        self.frames = 0
        self.written_steps = 0  # steps in emitted sequences, each counted once
        self.buffers: dict[str, np.ndarray] | None = None
        self.reset(seeds)

    def reset(self, seeds: list[int]) -> None:
        """Starts fresh episodes from ``seeds`` with fresh states; open sequences are dropped."""
        self.obs, _ = self.envs.reset(seed=seeds)
        self.resetting = np.zeros(self.num_envs, dtype=bool)  # next step is an auto-reset
        self.state = self.policy.initial_state(self.num_envs)
        self.cursor = np.zeros(self.num_envs, dtype=np.int64)  # steps in the open sequence
        self.new = np.zeros(self.num_envs, dtype=np.int64)  # of which no item holds yet
        self.episodes_tracker.reset()

    def _allocate(self, obs: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
        n, length = self.num_envs, self.length
        return {
            "observation": np.zeros((n, length + 1, *obs.shape[1:]), obs.dtype),
            "action": np.zeros((n, length, *actions.shape[1:]), actions.dtype),
            "reward": np.zeros((n, length), np.float32),
            "terminated": np.zeros((n, length), bool),
            "truncated": np.zeros((n, length), bool),
            "state": np.zeros((n, length, self.state.shape[-1]), np.float32),
            "policy_version": np.zeros((n, length), np.int64),
        }

    def rollout(
        self, num_steps: int, explore, policy_version: int, *, seeds: list[int] | None = None
    ) -> RolloutBatch:
        """Steps every sub-env ``num_steps`` times; returns the sequences that closed.

        Args:
            num_steps: Vector steps to take.
            explore: Exploration parameters handed to the policy (a float is an epsilon).
            policy_version: Stored with every step.
            seeds: Unused (episodes and sequences continue across rollouts).
        """
        del seeds
        n, length = self.num_envs, self.length
        items: list[dict[str, np.ndarray]] = []
        rewards = np.zeros((num_steps, n), np.float32)
        live = np.zeros((num_steps, n), bool)
        ended = np.zeros((num_steps, n), bool)
        added = 0
        obs, state = self.obs, self.state
        with torch.inference_mode():
            for t in range(num_steps):
                actions, _, next_state = self.policy.act(obs, explore, state=state)
                actions = np.asarray(actions)
                if self.buffers is None:
                    self.buffers = self._allocate(np.asarray(obs), actions)
                buf = self.buffers
                real = ~self.resetting
                rows = np.flatnonzero(real)
                at = self.cursor[rows]
                # Stored before stepping: the vector env reuses its observation buffer
                # (copy=False), so ``obs`` holds the next observation once it has stepped.
                buf["observation"][rows, at] = np.asarray(obs)[rows]
                next_obs, reward, terminated, truncated, _ = self.envs.step(actions)
                buf["action"][rows, at] = actions[rows]
                buf["reward"][rows, at] = reward[rows]
                buf["terminated"][rows, at] = terminated[rows]
                buf["truncated"][rows, at] = truncated[rows]
                buf["state"][rows, at] = state[rows]
                buf["policy_version"][rows, at] = policy_version
                self.cursor[rows] += 1
                self.new[rows] += 1
                done = (np.asarray(terminated) | np.asarray(truncated)) & real
                full = real & ~done & (self.cursor == length)
                for e in np.flatnonzero(done | full):
                    buf["observation"][e, self.cursor[e]] = np.asarray(next_obs)[e]
                    items.append(self._item(e))
                    added += int(self.new[e])
                    self._advance(e, bool(done[e]))
                rewards[t], live[t], ended[t] = reward, real, done
                # The step after an episode's end was an auto-reset: the next observation is a
                # new episode's first, whose state is zeros.
                next_state = np.array(next_state, np.float32, copy=True)
                next_state[self.resetting] = 0.0
                self.resetting = done
                obs, state = next_obs, next_state
        self.obs, self.state = obs, state
        returns, lengths = self.episodes_tracker.update(rewards, live, ended)
        self.frames += added
        self.written_steps += added
        if not items:  # no sequence closed: zero rows of the item's columns
            template = {k: np.zeros_like(v) for k, v in self._item(0).items()}
            items_or_empty = {k: v[:0] for k, v in self._columns([template]).items()}
        else:
            items_or_empty = self._columns(items)
        return RolloutBatch(items_or_empty, returns, lengths, counted=added)

    def _columns(self, items: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Items stacked into columns; with ``frame_stack``, observations as unique frames."""
        columns = _stack(items)
        if self.frame_stack:
            observation = columns.pop("observation")
            if observation.ndim < 3 or observation.shape[2] != self.frame_stack:
                raise ValueError(
                    f"replay.frame_stack: {self.frame_stack} frames per observation, the env "
                    f"observes {list(observation.shape[2:])}"
                )
            columns[FRAMES_COLUMN] = encode_sequence_frames(observation, columns["valid"])
        return columns

    def _item(self, e: int) -> dict[str, np.ndarray]:
        """The open sequence of env ``e`` as one item (padding zeroed)."""
        buf, steps = self.buffers, int(self.cursor[e])
        item = {
            key: buf[key][e].copy()
            for key in ("observation", "action", "reward", "terminated", "truncated")
        }
        item["observation"][steps + 1 :] = 0
        for key in ("action", "reward", "terminated", "truncated"):
            item[key][steps:] = 0
        item["valid"] = np.arange(self.length) < steps
        item["recurrent_state"] = buf["state"][e, 0].copy()
        item["burn_in"] = np.asarray(self.burn_in, np.int64)
        item["policy_version"] = np.asarray(buf["policy_version"][e, 0], np.int64)
        if self.marks_new_steps:
            item[NEW_STEPS] = np.asarray(self.new[e], np.int64)
        return item

    def _advance(self, e: int, episode_ended: bool) -> None:
        """After emitting env ``e``'s sequence: a new episode's, or the overlapping next one."""
        self.new[e] = 0
        if episode_ended or self.overlap == 0:
            self.cursor[e] = 0
            return
        keep = self.overlap
        for key, value in self.buffers.items():
            if key == "observation":
                value[e, : keep + 1] = value[e, self.length - keep :].copy()
            else:
                value[e, :keep] = value[e, self.length - keep :].copy()
        self.cursor[e] = keep


def _stack(items: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Items stacked into columns."""
    return {key: np.stack([item[key] for item in items]) for key in items[0]}


__all__ = ["SequenceLayout", "SequenceWorker"]
