"""Asynchronous greedy evaluation: its pure core (no Ray); the section is ``services.config``.

Training returns are measured with exploration on; a policy is judged by greedy episodes.
With ``evaluation.interval_frames > 0`` an evaluator actor (``services.evaluation.evaluator``) runs
``evaluation.episodes`` episodes on its own envs and seeds with the deterministic form of the
collector policy (greedy Q-values, the mode or mean of a stochastic actor) every
``interval_frames`` collected frames, while training goes on.

Scheduling (:class:`EvalSchedule`) is a pure object the driver feeds with frame counts:

* an evaluation is **due** when the frames pass the next multiple of ``interval_frames``; it
  snapshots the newest published weights at that moment;
* intervals that elapse while an evaluation runs **coalesce** into one evaluation, started
  when the running one finishes, with the weights newest at that point;
* ``run_at_start`` evaluates version 0 once set up; ``run_at_end`` evaluates the final version
  unless the last evaluation (finished or running) already used it; ``wait_at_end`` waits up
  to ``timeout_s`` for it before the final checkpoint and summary;
* a checkpoint keeps only the next due frame and the last completed result
  (:meth:`EvalSchedule.state_dict`): an evaluation in flight at the cut is dropped on resume.

Episodes are counted exactly (:func:`run_episodes`): env ``i`` of ``num_envs`` runs its share of
the episodes, so short episodes do not crowd out long ones. Every evaluation of a run resets its
envs with the same seeds (:func:`evaluation_seeds` of the run's seed), so evaluations of
different versions play the same episodes, and ``python -m services.evaluate`` on a checkpoint
replays the run's own evaluation of that version exactly.

Examples:
    >>> schedule = EvalSchedule(interval_frames=1000)
    >>> schedule.due(999), schedule.due(1000)
    (False, True)
    >>> schedule.started(version=3, frames=1000)
    >>> schedule.due(2100), schedule.due(3200)  # both coalesce into one pending evaluation
    (False, False)
    >>> schedule.finished(EvalResult(3, 1000, (10.0, 12.0), (10, 12), 0.1))  # start it now
    True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

EVALUATION_STREAM = 0xE7A1  # the evaluator's seeds: (run seed, this), apart from collectors'


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """One completed evaluation.

    Attributes:
        version: Model version of the weights evaluated.
        frames: Collected frames when it was started.
        returns: Undiscounted return of each episode.
        lengths: Length of each episode.
        wall_s: Seconds the evaluator took.
    """

    version: int
    frames: int
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    wall_s: float

    def record(self) -> dict[str, Any]:
        """The flat record logged under ``evaluation`` (``evaluation/episode_return_mean``)."""
        returns = np.asarray(self.returns, np.float64)
        return {
            "episode_return_mean": float(returns.mean()),
            "episode_return_std": float(returns.std()),
            "episode_return_min": float(returns.min()),
            "episode_return_max": float(returns.max()),
            "episode_length_mean": float(np.mean(self.lengths)),
            "episodes": len(self.returns),
            "version": self.version,
            "frames": self.frames,
            "wall_s": round(self.wall_s, 3),
        }


class EvalSchedule:
    """When to evaluate, and what a checkpoint keeps of it (pure).

    Args:
        interval_frames: Frames between evaluations.
    """

    def __init__(self, interval_frames: int) -> None:
        self.interval_frames = interval_frames
        self.next_due_frames = interval_frames
        self.running_version: int | None = None
        self.coalesced = 0  # due intervals absorbed while an evaluation ran
        self.pending = False
        self.last: dict[str, Any] | None = None  # the last completed result's record
        self.completed = 0

    @property
    def running(self) -> bool:
        """Whether an evaluation is in flight."""
        return self.running_version is not None

    def due(self, frames: int) -> bool:
        """Advances the schedule to ``frames``; True when an evaluation should start now.

        While one runs, elapsed intervals are remembered as a single pending evaluation.
        """
        if frames < self.next_due_frames:
            return False
        self.next_due_frames = (frames // self.interval_frames + 1) * self.interval_frames
        if self.running:
            self.coalesced += int(self.pending)
            self.pending = True
            return False
        return True

    def started(self, version: int, frames: int) -> None:
        """Records that an evaluation of ``version`` started at ``frames``."""
        self.running_version = version
        self.pending = False

    def finished(self, result: EvalResult | None) -> bool:
        """Records the end of the running evaluation (None: it failed).

        Returns:
            True when a coalesced evaluation is pending and should start now.
        """
        self.running_version = None
        if result is not None:
            self.last = result.record()
            self.completed += 1
        return self.pending

    def needs_final(self, version: int) -> bool:
        """Whether ``run_at_end`` must still evaluate ``version`` (the final one)."""
        if self.running_version == version:
            return False
        return self.last is None or self.last["version"] != version

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the next due frame and the last completed result."""
        return {"next_due_frames": self.next_due_frames, "last": self.last}

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Restores :meth:`state_dict`; an evaluation in flight at the cut is dropped."""
        if not state:
            return
        self.next_due_frames = int(state["next_due_frames"])
        self.last = state.get("last")
        self.running_version = None
        self.pending = False


def episode_quotas(episodes: int, num_envs: int) -> list[int]:
    """Episodes per env: ``episodes`` split as evenly as possible, the first envs one more."""
    return [episodes // num_envs + (1 if i < episodes % num_envs else 0) for i in range(num_envs)]


def evaluation_seeds(seed: int, num_envs: int) -> list[int]:
    """The reset seeds of an evaluation's ``num_envs`` envs for a run of ``seed``.

    A stream of its own, apart from every collector's (``collector.envs.vector.env_seeds``).

    Examples:
        >>> evaluation_seeds(0, 2) == evaluation_seeds(0, 2) != evaluation_seeds(1, 2)
        True
    """
    state = np.random.SeedSequence([seed, EVALUATION_STREAM]).generate_state(num_envs)
    return [int(s) for s in state]


def run_episodes(
    envs,
    policy,
    episodes: int,
    seeds: list[int],
    explore: Mapping[str, Any] | None = None,
    *,
    action_mask_key: str | None = None,
) -> tuple[list[float], list[int]]:
    """Runs exactly ``episodes`` episodes with the policy's deterministic actions.

    Args:
        envs: A gymnasium vector env in ``NEXT_STEP`` autoreset mode (``make_vector_env``).
        policy: A collector policy (``act(obs, explore) -> (actions, extras)``); a recurrent
            one (``recurrent``: ``act(obs, explore, state=) -> (actions, extras,
            next_state)``) gets a state per env, zeros at every episode's first step.
        episodes: Episodes to finish, split over the envs by :func:`episode_quotas`.
        seeds: One reset seed per env.
        explore: The exploration handed to ``policy.act`` (default ``{"deterministic":
            True}``; e.g. ``{}`` samples a stochastic actor).
        action_mask_key: Where the envs report action masks (``collector.envs.masks``): the
            policy acts under them (``act(obs, explore, mask=...)``).

    Returns:
        Returns and lengths of the episodes, env by env in finishing order.

    Continuous actions are clipped to a ``Box`` action space's bounds, as collectors do.
    """
    from gymnasium.spaces import Box  # the envs are gymnasium's (or look like them)

    from collector.envs.masks import mask_reader

    space = getattr(envs, "single_action_space", None)
    bounds = (space.low, space.high) if isinstance(space, Box) else None
    n = envs.num_envs
    quotas = episode_quotas(episodes, n)
    finished = [0] * n
    episode_return = np.zeros(n, np.float64)
    episode_length = np.zeros(n, np.int64)
    resetting = np.zeros(n, bool)  # the step after an episode's end is the autoreset step
    returns: list[float] = []
    lengths: list[int] = []
    obs, info = envs.reset(seed=seeds)
    masks = mask_reader(envs, action_mask_key)
    explore = {"deterministic": True} if explore is None else dict(explore)
    recurrent = getattr(policy, "recurrent", False)
    state = policy.initial_state(n) if recurrent else None
    while any(done < quota for done, quota in zip(finished, quotas, strict=True)):
        kwargs: dict[str, Any] = {} if masks is None else {"mask": masks.read(info)}
        if recurrent:
            actions, _, state = policy.act(obs, explore, state=state, **kwargs)
        else:
            actions, _ = policy.act(obs, explore, **kwargs)
        if bounds is not None:
            actions = np.clip(actions, *bounds)
        obs, rewards, terminated, truncated, info = envs.step(actions)
        for i in range(n):
            if resetting[i]:  # the autoreset step: obs[i] is a new episode's first
                resetting[i] = False
                if recurrent:
                    state[i] = 0.0
                continue
            episode_return[i] += float(rewards[i])
            episode_length[i] += 1
            if terminated[i] or truncated[i]:
                if finished[i] < quotas[i]:
                    returns.append(float(episode_return[i]))
                    lengths.append(int(episode_length[i]))
                    finished[i] += 1
                episode_return[i], episode_length[i] = 0.0, 0
                resetting[i] = True
    return returns, lengths


def metric_value(record: Mapping[str, Any], metric: str) -> float | None:
    """Looks up ``evaluation/episode_return_mean`` or ``learner.loss_q`` in a nested record."""
    node: Any = record
    for part in metric.replace("/", ".").split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if node is None:
        return None
    value = float(node)
    return None if math.isnan(value) else value
