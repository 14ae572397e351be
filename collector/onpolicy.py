"""The pure on-policy rollout core: fixed-length rollouts with advantages (no Ray).

On-policy learners train on exactly what one policy version collected, so every rollout must
yield a known number of transitions. The worker steps a vector env in gymnasium's
``SAME_STEP`` autoreset mode: the step that ends an episode already returns the next episode's
first observation (the final one is in ``info["final_obs"]``), so every step is a transition and
a rollout of ``T`` vector steps over ``n`` envs yields exactly ``T * n`` of them.

Two kinds of rollouts (:class:`OnPolicyWorker`):
    * ``gae``: ``T`` steps per env; episodes continue across rollouts. Advantages and value
      targets come from :func:`collector.advantages.gae`, bootstrapping from ``V(s_T)`` at the
      rollout's end and from the final state's value at a truncation (one extra critic pass
      over the truncated envs' final observations).
    * ``episodes``: Monte-Carlo (REINFORCE). The envs are reset with fresh seeds and every env
      runs exactly one complete episode; steps an env takes after its episode ended are not
      transitions (not stored, not counted). Returns come from
      :func:`collector.advantages.returns_to_go`; with a value baseline, truncations bootstrap
      from the critic and ``advantage = G - V(s)``, without one ``advantage = G``.

Every transition stores ``observation, action, reward, terminated, truncated, policy_version,
log_prob, value, advantage, value_target`` (and ``action_mask`` with
``action_mask_key``: the policy acts under each observation's mask, ``collector.envs.masks``).

A recurrent policy (``policy.recurrent``, ``collector.networks.stepping.RecurrentPolicy``) keeps
one state per env, acting on all envs in one batched call; the state is zeroed where an episode
starts (after :meth:`OnPolicyWorker.reset` and after every step that ended an episode: the
``SAME_STEP`` autoreset) and carried across rollouts and weight updates otherwise. A
truncation bootstraps from the final observation under the state *before* the reset, the
rollout's last value from the current state. Its rollouts are stored as sequences
(:mod:`collector.sequences`: ``transform.sequence_length`` steps of one env, each with the state
before its first step and ``reset``/``valid`` flags); the advantages are computed first, on the
whole rollout.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from collector.advantages import gae, returns_to_go
from collector.config import OnPolicyTransform
from collector.envs.episodes import CountsEpisodes, EpisodeTracker
from collector.envs.masks import MASK_COLUMN, mask_reader
from collector.envs.spaces import concatenated, copied, stacked, stored
from collector.rollout import RolloutBatch
from collector.sequences import RESET_COLUMN, STATE_COLUMN, to_sequences

# An env whose episode runs longer than this in an ``episodes`` rollout has no time limit.
MAX_EPISODE_STEPS = 100_000

__all__ = ["MAX_EPISODE_STEPS", "OnPolicyTransform", "OnPolicyWorker"]


class OnPolicyWorker(CountsEpisodes):
    """Steps a ``SAME_STEP`` vector env with a stochastic actor-critic policy.

    Args:
        envs: A gymnasium vector env in ``SAME_STEP`` autoreset mode.
        policy: Has ``act(obs, explore) -> (actions, {"log_prob", "value"})`` and
            ``value(obs) -> [n]``; a recurrent one (``recurrent = True``) has
            ``act(obs, explore, state=) -> (actions, extras, next_state)``,
            ``value(obs, state)`` and ``initial_state(n)``.
        seeds: One reset seed per sub-env.
        transform: What targets to build.
        action_mask_key: Where the envs report action masks; None: no masks.

    Examples:
        >>> from collector.envs.vector import make_vector_env
        >>> from collector.networks.actor_critic import ActorCriticSpec
        >>> spec = ActorCriticSpec(4, 2)
        >>> policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
        >>> envs = make_vector_env("CartPole-v1", 2, autoreset="same_step")
        >>> worker = OnPolicyWorker(envs, policy, [1, 2], OnPolicyTransform())
        >>> worker.rollout(num_steps=10, explore={}, policy_version=0).frames
        20
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        policy,
        seeds: list[int],
        transform: OnPolicyTransform,
        *,
        action_mask_key: str | None = None,
    ) -> None:
        self.envs = envs
        self.policy = policy
        self.num_envs = envs.num_envs
        self.transform = transform
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
        self.episodes_tracker.reset()
        if self.recurrent:  # every env starts an episode: fresh state
            self.state = self.policy.initial_state(self.num_envs)
            self.starting = np.ones(self.num_envs, dtype=bool)

    def rollout(
        self, num_steps: int, explore, policy_version: int, *, seeds: list[int] | None = None
    ) -> RolloutBatch:
        """Collects one rollout (see the module docstring for the two kinds).

        Args:
            num_steps: Vector steps (``gae``); ignored by ``episodes`` rollouts, which run
                until every env has finished one episode.
            explore: Exploration parameters handed to the policy.
            policy_version: Stored with every transition.
            seeds: ``episodes`` only: reset seeds of this rollout's episodes.
        """
        whole = self.transform.kind == "episodes"
        if whole:
            self.reset(seeds if seeds is not None else [None] * self.num_envs)
        steps = self._step(num_steps, explore, whole)
        valid = steps.pop("valid")
        done = steps["terminated"] | steps["truncated"]
        returns, lengths = self.episodes_tracker.update(steps["reward"], valid, done & valid)
        if whole:
            self.episodes_tracker.reset()
        self._targets(steps)
        counted = int(valid.sum())
        if self.recurrent:
            starts = steps.pop(STATE_COLUMN)
            length = self.transform.sequence_length or len(valid)
            transitions = to_sequences(steps, starts, valid, length)
            items = len(transitions[STATE_COLUMN])
            transitions["policy_version"] = np.full(items, policy_version, np.int64)
            batch = RolloutBatch(transitions, returns, lengths, counted=counted)
        else:
            transitions = {k: v[valid] for k, v in steps.items()}
            transitions["policy_version"] = np.full(counted, policy_version, np.int64)
            batch = RolloutBatch(transitions, returns, lengths)
        if self.masks is not None:
            batch.invalid_actions = self.masks.count(
                steps["action"][valid], steps[MASK_COLUMN][valid]
            )
        self.frames += batch.frames
        return batch

    def _step(self, num_steps: int, explore, whole: bool) -> dict[str, np.ndarray]:
        """Steps the envs; returns time-major buffers plus ``valid`` and the bootstrap values."""
        n = self.num_envs
        act, step, bounds = self.policy.act, self.envs.step, self.action_bounds
        rows: dict[str, list[np.ndarray]] = {}
        # (t, env indices, final obs, the state after the step: None if feed-forward)
        finals: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]] = []
        running = np.ones(n, dtype=bool)  # ``episodes``: env still in its first episode
        valid_rows = []
        obs, masks, mask = self.obs, self.masks, self.mask
        recurrent = self.recurrent
        if recurrent:
            state, starting = self.state, self.starting
            fresh = False  # ``self.state``: zeroed into a copy, as kept states are
            length = self.transform.sequence_length or MAX_EPISODE_STEPS
            starts: list[np.ndarray] = []  # the state before each sequence's first step
        kwargs: dict = {}
        t = 0
        with torch.inference_mode():
            while (running.any() if whole else t < num_steps) and t < MAX_EPISODE_STEPS:
                if masks is not None:
                    kwargs["mask"] = mask
                row: dict = {"observation": copied(obs)}
                if recurrent:  # zero the state where an episode starts (autoreset included)
                    if starting.any():
                        state = _zeroed(state, starting, fresh)
                    if t % length == 0:  # a stored sequence starts here
                        starts.append(state)
                    row[RESET_COLUMN] = starting
                    actions, extras, next_state = act(obs, explore, state=state, **kwargs)
                else:
                    actions, extras = act(obs, explore, **kwargs)
                if masks is not None:
                    extras = {**extras, MASK_COLUMN: mask}
                row |= {"action": actions, **extras}
                obs, reward, terminated, truncated, info = step(
                    np.clip(actions, *bounds) if bounds is not None else actions
                )
                row.update(reward=reward, terminated=terminated, truncated=truncated)
                if masks is not None:
                    mask = masks.read(info)
                for key, value in row.items():
                    rows.setdefault(key, []).append(
                        value if key == "observation" else np.asarray(value)
                    )
                if truncated.any():
                    envs = np.flatnonzero(truncated)
                    final = stacked([info["final_obs"][e] for e in envs])
                    finals.append((t, envs, final, next_state[envs] if recurrent else None))
                if recurrent:
                    # the policy's own array, unless it hands back ``state`` or a view of it
                    fresh = not np.may_share_memory(next_state, state)
                    state, starting = next_state, np.asarray(terminated | truncated)
                valid_rows.append(running.copy())
                if whole:
                    running &= ~(terminated | truncated)
                t += 1
        if whole and running.any():
            raise RuntimeError(f"an episode ran past {MAX_EPISODE_STEPS} steps: no time limit?")
        self.obs, self.mask = obs, mask
        if recurrent:
            self.state, self.starting = state, starting
        observations = stacked(rows.pop("observation"))
        steps = (
            stored(observations)
            if isinstance(observations, dict)
            else {"observation": observations}
        )
        steps |= {k: np.stack(v) for k, v in rows.items()}
        steps["reward"] = steps["reward"].astype(np.float32)
        steps["valid"] = np.stack(valid_rows)
        if recurrent:
            steps[STATE_COLUMN] = np.stack(starts)
        bootstrap = np.zeros(steps["reward"].shape, dtype=np.float32)
        needs_values = not whole or self.transform.baseline
        if finals and needs_values:
            final_obs = concatenated([f for _, _, f, _ in finals])
            if recurrent:  # under the state before the reset
                values = self.policy.value(final_obs, np.concatenate([s for *_, s in finals]))
            else:
                values = self.policy.value(final_obs)
            offset = 0
            for t_end, envs, *_ in finals:
                bootstrap[t_end, envs] = values[offset : offset + len(envs)]
                offset += len(envs)
        steps["bootstrap"] = bootstrap
        if not whole:
            if recurrent:  # the current state, zeroed where the next step starts an episode
                current = np.where(starting[:, None], np.float32(0.0), state)
                steps["last_value"] = self.policy.value(obs, current)[None]
            else:
                steps["last_value"] = self.policy.value(obs)[None]
        return steps

    def _targets(self, steps: dict[str, np.ndarray]) -> None:
        """Adds ``advantage`` and ``value_target`` (and drops the helper arrays)."""
        cfg = self.transform
        bootstrap = steps.pop("bootstrap")
        reward, terminated, truncated = steps["reward"], steps["terminated"], steps["truncated"]
        if cfg.kind == "gae":
            value = steps["value"]
            next_value = np.concatenate([value[1:], steps.pop("last_value")])
            next_value = np.where(truncated, bootstrap, next_value)
            steps["advantage"], steps["value_target"] = gae(
                reward,
                value,
                next_value,
                terminated,
                truncated,
                gamma=cfg.gamma,
                lam=cfg.gae_lambda,
            )
            return
        returns = returns_to_go(reward, terminated, truncated, gamma=cfg.gamma, bootstrap=bootstrap)
        steps["value_target"] = returns
        steps["advantage"] = returns - steps["value"] if cfg.baseline else returns


def _zeroed(state: np.ndarray, starting: np.ndarray, fresh: bool) -> np.ndarray:
    """``state`` with the rows of ``starting`` zeroed (exact zeros).

    In place when ``fresh`` (nothing else holds the array: the policy made it this step), else
    into a new array (the worker's kept state, a stored sequence's first state).
    """
    if fresh and state.flags.writeable and state.dtype == np.float32:
        state[starting] = 0.0
        return state
    return np.where(starting[:, None], np.float32(0.0), state)
