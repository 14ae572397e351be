"""The pure trajectory-chunk core of the asynchronous on-policy loop (IMPALA, APPO; no Ray).

V-trace (``learner.vtrace``) corrects for the lag between the policy that acted and the one
that learns, so the learner needs whole sequences of one env's steps with the acting policy's
log-probabilities, and evaluates its own value function on every state itself. One rollout of
``T`` vector steps over ``n`` envs yields ``n`` items (chunks), one per env:

    observation [T + 1, ...]   x_0 .. x_T (x_T: the chunk's last next state)
    action, log_prob, reward, terminated, truncated, valid [T]
    policy_version             the model version that acted (one per chunk)
    action_mask [T, width]     with ``action_mask_key``: the mask each action was taken under

The envs run in gymnasium's ``NEXT_STEP`` autoreset mode: the step that ends an episode returns
the episode's final observation, and the next step ignores its action and returns the next
episode's first one. So ``observation[t + 1]`` is always the true next state of step ``t``, a
truncation's final state included (the learner bootstraps a truncation from it, also in the
middle of a chunk), and the auto-reset steps are stored with ``valid = False``: they are not
transitions (not counted as frames, masked out of the loss, and the episode end before them
cuts the trace). Chunks continue across rollouts: an episode that ended on a rollout's last
step makes the next rollout's first step an auto-reset step.

A recurrent policy (``learner.recurrent``: ``policy.recurrent``) keeps one state per env, acting
on all envs in one batched call; the state is zeroed at each episode's first observation (after
:meth:`ChunkWorker.reset` and after every auto-reset step) and carried across rollouts and weight
updates otherwise. Each chunk then also stores

    recurrent_state [S]        the state before ``x_0``
    reset [T + 1]              True where ``x_t`` is an episode's first observation

so the learner runs the network over ``x_0 .. x_T`` from the stored state, zeroing it where
``reset`` is set, as the collector did.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from collector.envs.episodes import CountsEpisodes, EpisodeTracker
from collector.envs.masks import MASK_COLUMN, mask_reader
from collector.envs.spaces import copied, stacked, stored
from collector.rollout import RolloutBatch
from collector.sequences import RESET_COLUMN, STATE_COLUMN

STEP_KEYS = ("action", "log_prob", "reward", "terminated", "truncated", "valid")


class ChunkWorker(CountsEpisodes):
    """Steps a ``NEXT_STEP`` vector env with a stochastic policy into per-env chunks.

    Args:
        envs: A gymnasium vector env in ``NEXT_STEP`` autoreset mode.
        policy: Has ``act(obs, explore) -> (actions, {"log_prob": [n], ...})``.
        seeds: One reset seed per sub-env.
        action_mask_key: Where the envs report action masks (``collector.envs.masks``).

    Examples:
        >>> from collector.envs.vector import make_vector_env
        >>> from collector.networks.actor_critic import ActorCriticSpec
        >>> spec = ActorCriticSpec(4, 2)
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> worker = ChunkWorker(make_vector_env("CartPole-v1", 2), policy, [1, 2])
        >>> batch = worker.rollout(num_steps=10, explore={}, policy_version=3)
        >>> batch.transitions["observation"].shape, batch.transitions["action"].shape
        ((2, 11, 4), (2, 10))
        >>> batch.frames <= 20
        True
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        policy,
        seeds: list[int],
        *,
        action_mask_key: str | None = None,
    ) -> None:
        self.envs = envs
        self.policy = policy
        self.num_envs = envs.num_envs
        space = envs.single_action_space
        self.action_bounds = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None
        self.episodes_tracker = EpisodeTracker(self.num_envs)
        self.masks = mask_reader(envs, action_mask_key)
        self.frames = 0
        self.recurrent = bool(getattr(policy, "recurrent", False))
        self.reset(seeds)

    def reset(self, seeds: list[int]) -> None:
        """Starts fresh episodes from ``seeds``; partial episodes are dropped."""
        self.obs, info = self.envs.reset(seed=seeds)
        self.mask = None if self.masks is None else self.masks.read(info)
        self.resetting = np.zeros(self.num_envs, dtype=bool)  # next step is an auto-reset
        self.episodes_tracker.reset()
        if self.recurrent:  # every env starts an episode: fresh state
            self.state = self.policy.initial_state(self.num_envs)
            self.starting = np.ones(self.num_envs, dtype=bool)

    def rollout(
        self, num_steps: int, explore, policy_version: int, *, seeds: list[int] | None = None
    ) -> RolloutBatch:
        """Collects ``num_steps`` vector steps as one chunk per env.

        Args:
            num_steps: Vector steps ``T`` (the chunk length).
            explore: Exploration parameters handed to the policy.
            policy_version: Stored with every chunk.
            seeds: Unused (chunks continue episodes across rollouts).
        """
        del seeds
        act, step, bounds = self.policy.act, self.envs.step, self.action_bounds
        rows: dict[str, list] = {"observation": []}
        obs, masks, mask = self.obs, self.masks, self.mask
        recurrent = self.recurrent
        if recurrent:
            first_state, resets = self._episode_starts(), [self.starting]
        kwargs: dict = {}
        with torch.inference_mode():
            for _ in range(num_steps):
                if masks is not None:
                    kwargs["mask"] = mask
                    rows.setdefault(MASK_COLUMN, []).append(mask)
                if recurrent:
                    state = self._episode_starts()
                    actions, extras, self.state = act(obs, explore, state=state, **kwargs)
                else:
                    actions, extras = act(obs, explore, **kwargs)
                rows["observation"].append(copied(obs))
                rows.setdefault("action", []).append(np.asarray(actions))
                rows.setdefault("log_prob", []).append(np.asarray(extras["log_prob"]))
                rows.setdefault("valid", []).append(~self.resetting)
                obs, reward, terminated, truncated, info = step(
                    np.clip(actions, *bounds) if bounds is not None else actions
                )
                if masks is not None:
                    mask = masks.read(info)
                rows.setdefault("reward", []).append(np.asarray(reward, dtype=np.float32))
                rows.setdefault("terminated", []).append(np.asarray(terminated))
                rows.setdefault("truncated", []).append(np.asarray(truncated))
                if recurrent:  # the observation after an auto-reset starts an episode
                    self.starting = self.resetting.copy()
                    resets.append(self.starting)
                self.resetting = np.asarray(terminated) | np.asarray(truncated)
        rows["observation"].append(copied(obs))
        self.obs, self.mask = obs, mask
        observations = stacked(rows.pop("observation"))
        steps = {key: np.stack(value) for key, value in rows.items()}  # time-major
        valid = steps["valid"]
        invalid = (
            0 if masks is None else masks.count(steps["action"][valid], steps[MASK_COLUMN][valid])
        )
        done = (steps["terminated"] | steps["truncated"]) & valid
        returns, lengths = self.episodes_tracker.update(steps["reward"], valid, done)
        steps |= (
            stored(observations)
            if isinstance(observations, dict)
            else {"observation": observations}
        )
        chunks = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in steps.items()}
        chunks["policy_version"] = np.full(self.num_envs, policy_version, np.int64)
        if recurrent:
            chunks[STATE_COLUMN] = first_state
            chunks[RESET_COLUMN] = np.ascontiguousarray(np.stack(resets, axis=1))
        counted = int(valid.sum())
        self.frames += counted
        return RolloutBatch(chunks, returns, lengths, counted=counted, invalid_actions=invalid)

    def _episode_starts(self) -> np.ndarray:
        """The state with the rows of envs starting an episode zeroed (also kept)."""
        if self.starting.any():
            self.state = np.where(self.starting[:, None], np.float32(0.0), self.state)
        return self.state


__all__ = ["STEP_KEYS", "ChunkWorker"]
