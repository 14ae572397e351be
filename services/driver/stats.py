"""Driver-side counters: frames, steps, episodes (pure, no Ray)."""

from __future__ import annotations

import collections
import dataclasses
import math
import time


@dataclasses.dataclass
class RunCounters:
    """What the driver counts. Frames come from rollout receipts only (``docs/architecture.md``).

    Attributes:
        collected_frames: Frames counted from receipts, times ``frame_skip``.
        transitions: Transitions counted from receipts (equals replay writes).
        optim_steps: Optimizer steps counted from step receipts.
        model_version: Learner model version after the last round.
        published_version: Version of the newest published weights.
        generation: Current learner generation.
        rollouts: Counted rollout receipts.
        rounds: Finished learner rounds.
        episodes: Finished episodes.
        collector_failures: Rollouts lost to dead collectors (not counted).
        external_frames: Frames of ``collected_frames`` written by external actors (gRPC).
        replay_restarts: Replay shards found restarted (each came back empty).
        replay_items_lost: Items the restarted shards held at their last health report.
        replay_items_refilled: Items put back into restarted shards from a checkpoint.
        env_errors: Env exceptions inside rollouts (envs rebuilt, rollout not counted).
        nonfinite_steps: Optimizer steps skipped for a non-finite loss or gradient.
        checkpoint_failures: Checkpoints the disk refused (full, I/O error); the run went on.
        invalid_actions: Actions collectors took that the env's action mask forbade (must be 0;
            ``collector.action_mask_key``).
    """

    collected_frames: int = 0
    transitions: int = 0
    optim_steps: int = 0
    model_version: int = 0
    published_version: int = -1
    generation: int = 0
    rollouts: int = 0
    rounds: int = 0
    episodes: int = 0
    collector_failures: int = 0
    external_frames: int = 0
    replay_restarts: int = 0
    replay_items_lost: int = 0
    replay_items_refilled: int = 0
    env_errors: int = 0
    nonfinite_steps: int = 0
    checkpoint_failures: int = 0
    invalid_actions: int = 0


class EpisodeWindow:
    """Running mean of the last ``size`` episode returns and lengths."""

    def __init__(self, size: int) -> None:
        self.returns: collections.deque[float] = collections.deque(maxlen=size)
        self.lengths: collections.deque[int] = collections.deque(maxlen=size)

    def extend(self, returns, lengths) -> None:
        """Adds finished episodes."""
        self.returns.extend(returns)
        self.lengths.extend(lengths)

    @property
    def return_mean(self) -> float:
        """Mean return of the window (NaN before any episode)."""
        return sum(self.returns) / len(self.returns) if self.returns else math.nan

    @property
    def length_mean(self) -> float:
        """Mean length of the window (NaN before any episode)."""
        return sum(self.lengths) / len(self.lengths) if self.lengths else math.nan


class RateMeter:
    """Frames/s and steps/s over the interval since the last reading."""

    def __init__(self) -> None:
        self.last_time = time.perf_counter()
        self.last_values: dict[str, float] = {}

    def rates(self, **values: float) -> dict[str, float]:
        """Returns per-second rates of each value since the previous call."""
        now = time.perf_counter()
        elapsed = max(now - self.last_time, 1e-9)
        rates = {k: (v - self.last_values.get(k, 0.0)) / elapsed for k, v in values.items()}
        self.last_time, self.last_values = now, dict(values)
        return rates
