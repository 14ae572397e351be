"""The masked Connect Four entries of ``services.bench learn`` (DQN and PPO share the goal).

The env (``collector.envs.connect4``) pits the learner, moving first, against a uniformly random
opponent; a game's return is +1 (win), -1 (loss) or 0 (draw). Random against random the first
player wins 55.6% and loses 44.0% of 4,000 games (``collector.envs.connect4.random_baseline``,
seed 0): a mean return of 0.12. The entries ask a running mean return of 0.8 over 500 training
episodes (exploration included): a win rate of at least 80%, about 90% with the few draws and
losses left, far from anything random play reaches (a 500-game mean has a standard deviation of
0.044 around 0.12), and a window long enough (a few rollouts) that one lucky rollout does not
cross it. Each entry also reports ``invalid_actions`` over its seeds, which must be 0.
"""

from __future__ import annotations

from learner.algorithms.spec import LearnEntry, Reference

THRESHOLD = 0.8
EPISODE_WINDOW = 500
RANDOM_RETURN = 0.116  # win 0.556 - loss 0.440 (random_baseline(4000, seed 0))


def connect4_entry(algorithm: str, frame_budget: int, position: int) -> LearnEntry:
    """The ``connect4-<algorithm>-masked`` entry of ``connect4_<algorithm>_masked.yaml``."""
    return LearnEntry(
        f"connect4-{algorithm}-masked",
        f"connect4_{algorithm}_masked.yaml",
        THRESHOLD,
        frame_budget,
        Reference(
            None,
            RANDOM_RETURN,
            "random vs random (collector.envs.connect4.random_baseline, 4,000 games): the "
            "first player wins 55.6%, loses 44.0%",
            "a baseline, not a published agent: the threshold asks a win rate >= 80% against "
            "the random opponent",
        ),
        suites=("full",),  # pettingzoo: the marl extra
        episode_window=EPISODE_WINDOW,
        position=position,
    )
