"""Collectors joining and leaving a running :class:`~collector.manage.group.CollectorGroup`.

Live resizes (``Control/Scale``, ``collector.num_collectors: auto``) change the fleet without
pausing the collectors that stay:

* **joining**: :meth:`Fleet.start` reserves the next indices (an index is never reused within a
  run, so ``(seed, index, generation)`` seeds are never repeated) and starts the actors at once;
  :meth:`Fleet.admit` takes in the ones that have answered their ping (envs built, policy
  ready) and hands them the newest weights. Until then the index is empty and no rollout goes
  to it, so the fleet goes on collecting while the newcomers start.
* **leaving**: the driver stops issuing to a collector (``InFlight.retire``), counts the
  rollouts it still has in flight as they finish, then :meth:`Fleet.retire` kills it. A
  collector on a lost node is retired at once: its rollouts in flight fail and are dropped, so
  no frame is counted twice.

Rollouts travel directly (one Ray call each); a group that sends them through per-node hubs
(``collector.aggregate``) keeps its size until it is resumed at another one.

Examples:
    >>> fleet = Fleet(group)  # doctest: +SKIP
    >>> fleet.start(2, generation=1)  # indices 4 and 5 start  # doctest: +SKIP
    [4, 5]
    >>> fleet.admit(timeout=30)  # those that answered  # doctest: +SKIP
    [4, 5]
"""

from __future__ import annotations

import logging

import ray

logger = logging.getLogger(__name__)


class Fleet:
    """Starts, admits and retires the collectors of a running group (see the module).

    Args:
        group: The run's collector group.

    Attributes:
        joining: Index -> (actor, reference of its ping) of collectors not admitted yet.
        started: Collectors started by this fleet (joined or still joining).
        retired: Collectors retired (left the run or lost with their node).
    """

    def __init__(self, group) -> None:
        self.group = group
        self.joining: dict[int, tuple[ray.actor.ActorHandle, ray.ObjectRef]] = {}
        self.started = 0
        self.retired = 0

    def start(self, count: int, *, generation: int) -> list[int]:
        """Starts ``count`` collectors at the next indices; returns those indices."""
        group = self.group
        if group.aggregate:
            raise ValueError(
                "collector.aggregate: rollouts travel through per-node hubs; resize such a "
                "run by resuming its checkpoint at another size"
            )
        first = len(group.actors)
        indices = list(range(first, first + count))
        group.actors.extend([None] * count)  # reserved, empty until admitted
        group.known_versions.extend([(-1, -1)] * count)
        group.nodes.extend([None] * count)
        group.deaths.grow(count)
        for index in indices:
            actor = group.spawn(index, None, generation)
            self.joining[index] = (actor, actor.ping.remote())
        self.started += count
        return indices

    def admit(self, timeout: float = 0.0) -> list[int]:
        """Takes in the joining collectors that answered within ``timeout``; returns them.

        A joining collector whose start failed (its ping raised) is dropped and logged.
        """
        if not self.joining:
            return []
        refs = {ref: index for index, (_, ref) in self.joining.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        admitted = []
        for ref in ready:
            index = refs[ref]
            actor, _ = self.joining.pop(index)
            try:
                ray.get(ref)
            except ray.exceptions.RayError as err:
                logger.warning("collector-%d could not start: %s", index, err)
                ray.kill(actor, no_restart=True)
                continue
            self.group.actors[index] = actor
            admitted.append(index)
        if admitted:
            nodes = ray.get([self.group.actors[i].node_id.remote() for i in admitted])
            for index, node in zip(admitted, nodes, strict=True):
                self.group.nodes[index] = node
            if self.group.weights is not None:
                self.group.sync_weights(self.group.weights)
        return admitted

    def cancel(self, count: int) -> list[int]:
        """Stops up to ``count`` collectors still joining (newest first); returns them."""
        cancelled = sorted(self.joining, reverse=True)[:count]
        for index in cancelled:
            actor, _ = self.joining.pop(index)
            ray.kill(actor, no_restart=True)
        return cancelled

    def retire(self, index: int) -> None:
        """Kills collector ``index`` and leaves its index empty for the rest of the run."""
        actor = self.group.actors[index]
        if actor is None:
            return
        self.group.actors[index] = None
        self.retired += 1
        ray.kill(actor, no_restart=True)

    def set_shards(self, names: list[str], timeout: float = 60.0) -> None:
        """Every collector (and every later one) writes to the shards ``names`` from now on.

        Call it while the group is paused, so no write is in flight.
        """
        group = self.group
        group.shard_names = list(names)
        refs = {i: group.actors[i].set_shards.remote(names) for i in group.live()}
        refs |= {i: actor.set_shards.remote(names) for i, (actor, _) in self.joining.items()}
        for index, ref in refs.items():
            try:
                ray.get(ref, timeout=timeout)
            except ray.exceptions.RayActorError as err:  # restarted later, it skips gone shards
                logger.warning("collector-%d unavailable for set_shards: %s", index, err)
