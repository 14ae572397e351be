"""The entries of ``python -m services.bench learn``: a shipped config, its goal, its reference.

The entries are declared by the algorithm registrations (``learner.algorithms``: each
registration's ``learn``); this module gathers them into suites. Each :class:`Entry` names a
config in ``deploy/configs/`` and what the bench asks of it: the
running mean return (over ``episode_window`` training episodes) to reach, the frame budget to
reach it in, and the published figure it is compared with (:class:`Reference`: the frames in
which the reference reached a return at least the threshold, and where that figure is
published). The config's header comment names the same source and the settings taken from it.

The goal and the reference live in the registration, not in the run config: they are the
bench's questions about a config, not part of a run (the same config is a user's starting point
with any budget, and ``RunConfig`` refuses keys no component reads). The bench passes the
threshold, the window and the budget to each run as ``--set`` overrides
(``controller.stop_return``, ``controller.return_milestones``, ``controller.episode_window``,
``controller.total_frames``).

Suites: ``cpu`` holds what finishes on a 2-core machine in about 10 minutes per entry and seed;
``full`` holds every entry, for a machine with a GPU (the GPU configs ask for one) and the
``box2d``, ``mujoco``, ``atari`` and ``marl`` extras.

Examples:
    >>> [entry.name for entry in suite("cpu")][:2]
    ['cartpole-dqn', 'cartpole-ppo']
    >>> ENTRIES["lunarlander-ppo"].reference.frames
    1000000
"""

from __future__ import annotations

from learner.algorithms import learn_entries
from learner.algorithms.spec import SUITES, Reference
from learner.algorithms.spec import LearnEntry as Entry

_ENTRIES = tuple(learn_entries())
ENTRIES: dict[str, Entry] = {entry.name: entry for entry in _ENTRIES}


def suite(name: str) -> list[Entry]:
    """The entries of suite ``name`` (``cpu`` or ``full``), in the order they run.

    Raises:
        ValueError: If ``name`` is not a suite.
    """
    if name not in SUITES:
        raise ValueError(f"--suite: must be one of {SUITES}, got {name!r}")
    return [entry for entry in _ENTRIES if name in entry.suites]


__all__ = ["ENTRIES", "SUITES", "Entry", "Reference", "suite"]
