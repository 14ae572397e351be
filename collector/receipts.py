"""Messages produced by collectors."""

from __future__ import annotations

import dataclasses

from replay.receipts import WriteReceipt


@dataclasses.dataclass(frozen=True)
class RolloutReceipt:
    """What one rollout call did; the driver counts frames from these and nothing else.

    Attributes:
        collector_id: Index of the collector.
        seq: The collector's rollout sequence number (also the replay write's ``seq``).
        frames: Transitions written (agent steps; the driver multiplies by ``frame_skip``).
        episode_returns: Returns of the episodes that finished during the rollout.
        episode_lengths: Lengths of those episodes.
        policy_generation: Learner generation of the weights used.
        policy_version: Model version of the weights used (-1: initial, unpublished weights).
        writes: Replay write receipts of the rollout's transitions.
        rollout_s: Seconds spent stepping envs and the policy.
        write_s: Seconds from sending the replay write to its acknowledgement; the collector
            steps its next rollout meanwhile, so this time is not lost to collection.
        invalid_actions: Actions taken that the env's action mask forbade (must be 0;
            ``collector.envs.masks``).
        work_s: Seconds the collector's stepper spent on this rollout: applying newer weights,
            stepping (``rollout_s``) and sending the write. The rest of a collector's wall
            time it had no rollout to run: it waited for the driver's call (permission to
            collect, in the asynchronous loop the learner queue's room) or for weights.
    """

    collector_id: int
    seq: int
    frames: int
    episode_returns: tuple[float, ...]
    episode_lengths: tuple[int, ...]
    policy_generation: int
    policy_version: int
    writes: tuple[WriteReceipt, ...]
    rollout_s: float
    write_s: float
    invalid_actions: int = 0
    work_s: float = 0.0

    @property
    def frames_per_s(self) -> float:
        """Collection speed of this collector: transitions per second of stepping.

        Writes overlap the next rollout's stepping, so a busy collector delivers this rate.
        """
        return self.frames / max(self.rollout_s, 1e-9)
