"""How rollout calls reach the collectors and their receipts come back (driver side).

Two ways, one interface (``send`` returns a ticket, ``flush`` sends what is queued, finished
rollouts arrive in a :class:`~collector.manage.completions.Completions` queue):

    * :class:`DirectDispatch`: one Ray call per rollout from the driver to the collector; its
      ticket is the call's ``ObjectRef``. Right for small fleets: nothing between the driver
      and its collectors.
    * :class:`~collector.manage.hub.HubDispatch`: orders and receipts batched through one
      :class:`~collector.manage.hub.RolloutHub` per node; tickets are integers. Right for large
      fleets, where one Ray call per receipt would saturate the driver.

:class:`~collector.manage.group.CollectorGroup` picks one (``aggregate``) and keeps the rest of its
logic (weights, restarts, the pause barrier) the same for both.
"""

from __future__ import annotations

from collections.abc import Sequence

import ray

from collector.manage.completions import Completions, Finished


class DirectDispatch:
    """One Ray call per rollout; the finished call puts itself into ``completions``.

    Args:
        actors: Collector actor handles, by index.
        completions: Where finished rollouts go.
    """

    def __init__(self, actors: Sequence, completions: Completions) -> None:
        self.actors = actors
        self.completions = completions

    def send(self, index: int, frames: int, explore, weights) -> ray.ObjectRef:
        """Starts a rollout on collector ``index``; returns the reference of its receipt."""
        ref = self.actors[index].rollout.remote(frames, explore, weights)
        ref.future().add_done_callback(lambda future: self._done(ref, index, future))
        return ref

    def _done(self, ref: ray.ObjectRef, index: int, future) -> None:
        error = future.exception()
        result = None if error is not None else future.result()
        self.completions.put((Finished(ref, index, result, error),))

    def flush(self) -> None:
        """Nothing is queued: every rollout left when it was sent."""

    def close(self) -> None:
        """Nothing to stop."""
