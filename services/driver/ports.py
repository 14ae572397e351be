"""Ports: what a view of the run hands out of the run's own parts (``typing.Protocol``).

A view (``services.driver.views``) names what a consumer reads of the run; where that is one
of the run's parts (its inbox, fault recovery, live resizes, evaluation), the view names a port
here, the part's methods that consumer calls, never the part's class. So the views import no
class of the parts that read them, and the parts (``inbox``, ``recovery``, ``elastic``,
``services.evaluation.evaluator``) satisfy their ports structurally.

An inbox method takes the run (``inbox.poll(run)``); its ports are generic in what that run
must be (``Run``), so the view that hands out the port says what it hands back, e.g. a
loop's view holds ``inbox: InboxPort[InboxView]`` and calls ``c.inbox.poll(c)``: a type
checker refuses the call unless the loop's view is itself an ``InboxView``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future
    from contextlib import AbstractContextManager

    from services.driver.sizes import Sizes

Run = TypeVar("Run", contravariant=True)


class Barrier(Protocol[Run]):
    """The inbox as a checkpoint cut reaches it: external writes held and counted."""

    def barrier(self, controller: Run) -> AbstractContextManager[None]:
        """Holds new external writes and counts every acknowledged one (around a cut)."""


class ShardedBarrier(Barrier[Run], Protocol[Run]):
    """The inbox as a live resize of the replay shards reaches it."""

    shards: list  # the shards external writes go to (the driver path)


class InboxPort(Barrier[Run], Protocol[Run]):
    """The inbox as a loop reaches it at its boundaries."""

    def poll(self, controller: Run) -> None:
        """Counts acknowledged external writes, serves stop, checkpoint and scale requests."""

    def wait(self, controller: Run, timeout: float) -> bool:
        """With nothing in flight: whether to go on waiting for external frames."""


class ShardRestarts(Protocol):
    """The inbox as fault recovery reaches it."""

    def shard_restarted(self, index: int) -> None:
        """Replay shard ``index`` came back (its direct Insert server starts again)."""


class RecoveryPort(Protocol):
    """Fault recovery as a checkpoint cut and a live resize reach it."""

    def before_cut(self) -> None:
        """Before a cut: every replay shard answers (a restarted one is refilled first)."""

    def after_cut(self) -> None:
        """After a cut (written or not)."""

    def watch_shards(self, shards: list) -> None:
        """Starts the health checks of the run's (new) replay shards."""


class Follower(Protocol):
    """What follows the cluster at each loop boundary (``services.driver.autoscale``)."""

    def step(self) -> None:
        """At a loop boundary: drops lost collectors, resizes to what the cluster offers."""


class ElasticPort(Protocol):
    """Live resizes as the loops, the inbox, snapshots and autoscaling reach them."""

    target: Sizes | None
    follow: Follower | None

    def step(self) -> None:
        """At a loop boundary: admits joined collectors, retires drained leaving ones."""

    def collecting(self) -> list[int]:
        """Indices of the collectors to issue rollouts to (admitted, not leaving)."""

    def report(self) -> dict:
        """Current and target sizes, collectors dropped (snapshots)."""

    def request(
        self,
        collectors: int = 0,
        shards: int = 0,
        world_size: int = 0,
        *,
        cause: str = "scale request",
    ) -> Sizes:
        """Sets new target sizes (0 keeps a size); returns the targets."""

    def wait(self) -> Future:
        """A future resolved with the sizes once every target is reached."""

    def drop(self, index: int) -> None:
        """Collector ``index`` was lost with its node: retired now, its rollouts dropped."""

    def record(self, what: str, before: int, after: int, cause: str, started: float) -> None:
        """Logs, keeps and emits one resize done since ``started``."""


class EvaluationPort(Protocol):
    """Evaluation as the checkpoint cut and the run's snapshots reach it."""

    def state_dict(self) -> dict:
        """The schedule and the last results, for the driver's checkpoint."""

    def load_state_dict(self, state: dict | None) -> None:
        """Restores :meth:`state_dict`."""

    def snapshot(self) -> dict:
        """The last result, for a progress snapshot."""

    def summary(self) -> dict:
        """The results, for the run's summary."""


__all__ = [
    "Barrier",
    "ElasticPort",
    "EvaluationPort",
    "Follower",
    "InboxPort",
    "RecoveryPort",
    "Run",
    "ShardRestarts",
    "ShardedBarrier",
]
