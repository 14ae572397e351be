"""CollectorGroup: starts, addresses, pauses, restores and restarts the collector actors."""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import ray

from collector.manage.completions import Completions, Finished
from collector.manage.dispatch import DirectDispatch
from collector.manage.hub import HubDispatch, HubDown, RolloutLostError, start_hubs
from collector.manage.remote import remote_collector
from collector.manage.restarts import DeathLedger

logger = logging.getLogger(__name__)

# Longest wait for a collector's control call (state, versions, restore): every remote call the
# driver waits on has a timeout, so a stuck collector fails the call instead of hanging the run.
CONTROL_TIMEOUT_S = 300.0


class CollectorsPausedError(RuntimeError):
    """A rollout was asked of a paused CollectorGroup."""


class CollectorGroup:
    """``num_collectors`` named Collector actors, restarted by Ray when they die.

    Actors are named ``<run>.collector-<i>`` in namespace ``relayrl``. A collector that dies is
    restarted by Ray (``max_restarts``); its in-flight rollouts fail with ``RayActorError`` and
    are not counted by the driver, which calls :meth:`mark_dead`; the group then re-sends the
    newest weights it has seen with that collector's next rollout.

    Rollouts: :meth:`rollout` returns a ticket, :meth:`completed` the rollouts that finished
    (:class:`~collector.manage.completions.Finished`, each once, under its ticket), at a cost that
    does not grow with the rollouts in flight. With ``aggregate`` they travel through one
    :class:`~collector.manage.hub.RolloutHub` per node, batched both ways
    (``collector.manage.dispatch``).

    Pause barrier: :meth:`pause` refuses new rollouts, waits until every rollout this group
    started has finished (a finished rollout's write is acknowledged: receipts come back only
    after their writes), then pauses each actor; :meth:`resume` undoes it. Rollouts that
    finished meanwhile come back from the next :meth:`completed`.

    Args:
        run_name: The run id, used in actor names.
        num_collectors: Number of collector actors.
        env_id: Gymnasium id or ``module:function`` env factory.
        envs_per_collector: Sub-envs per collector.
        model_spec: Network spec shared with the learners.
        shards: Replay shard handles or actor names (see ``Collector``).
        seed: Run seed.

    Keyword Args:
        num_cpus: Logical CPUs per collector.
        max_restarts: Restarts Ray grants each collector.
        vector_mode: ``"sync"`` or ``"async"`` vector env.
        env_kwargs: Keyword arguments of the env.
        n_step: Steps per transition window.
        gamma: Discount of the n-step returns.
        transform: ``collector.onpolicy.OnPolicyTransform`` for on-policy collectors.
        frame_stack: Write frame streams for a frame-deduplicated replay (0: off).
        action_mask_key: Where the env reports action masks (``collector.envs.masks``).
        scheduling: One scheduling strategy per collector (e.g. bundles of the run's placement
            group); None entries or None: Ray's default. A restarted collector keeps its own.
        aggregate: Send rollouts through one hub per node (started by :meth:`wait_ready`).
        generation: The run's learner generation (seeds of collectors started by a run resumed
            at another size; see ``collector.actor.Collector``).
        sequences: Write sequences (``collector.sequence_worker.SequenceLayout``); None:
            transitions.
        nice: Nice levels each collector process adds to its own (``collector.niceness``).

    Examples:
        >>> group = CollectorGroup("run", 2, "CartPole-v1", 8, spec, shards, 0)  # doctest: +SKIP
        >>> receipt = ray.get(group.rollout(0, 1024, {"epsilon": 0.1}))  # doctest: +SKIP
        >>> ticket = group.rollout(1, 1024, {"epsilon": 0.1})  # doctest: +SKIP
        >>> [finished] = group.completed(timeout=60)  # finished.ticket == ticket  # doctest: +SKIP
        >>> group.pause(); states = group.state_dicts(); group.resume()  # doctest: +SKIP
    """

    def __init__(
        self,
        run_name: str,
        num_collectors: int,
        env_id: str,
        envs_per_collector: int,
        model_spec,
        shards: Sequence[ray.actor.ActorHandle | str],
        seed: int,
        *,
        num_cpus: float = 1.0,
        max_restarts: int = 3,
        vector_mode: str = "sync",
        env_kwargs: Mapping[str, Any] | None = None,
        n_step: int = 1,
        gamma: float = 0.99,
        transform=None,
        frame_stack: int = 0,
        action_mask_key: str | None = None,
        scheduling: Sequence | None = None,
        aggregate: bool = False,
        generation: int = 0,
        sequences=None,
        nice: int = 0,
    ) -> None:
        scheduling = list(scheduling) if scheduling is not None else [None] * num_collectors
        self.shard_names = list(shards)  # what new collectors write to (live resizes change it)

        def spawn(index: int, strategy=None, generation: int = 0) -> ray.actor.ActorHandle:
            return remote_collector(
                run_name,
                index,
                env_id,
                envs_per_collector,
                model_spec,
                list(self.shard_names),
                seed,
                vector_mode,
                num_cpus=num_cpus,
                max_restarts=max_restarts,
                env_kwargs=dict(env_kwargs or {}),
                n_step=n_step,
                gamma=gamma,
                transform=transform,
                frame_stack=frame_stack,
                action_mask_key=action_mask_key,
                generation=generation,
                sequences=sequences,
                nice=nice,
                scheduling_strategy=strategy,
            )

        self.spawn = (
            spawn  # collector.manage.fleet starts collectors joining a running group with it
        )
        self.actors = [spawn(i, scheduling[i], generation) for i in range(num_collectors)]
        self._init_state(run_name, aggregate=aggregate)

    def _init_state(self, run_name: str, *, aggregate: bool = False) -> None:
        """The group's bookkeeping over ``self.actors`` (shared with simulated groups)."""
        num_collectors = len(self.actors)
        self.run_name = run_name
        self.aggregate = aggregate
        # (generation, version) each collector is known to hold; reset when one dies.
        self.known_versions = [(-1, -1)] * num_collectors
        self.weights = None  # the newest PublishedWeights seen
        self.nodes: list[str | None] = [None] * num_collectors  # Ray node ids, for messages
        self.paused = False
        self.completions = Completions()
        self.dispatch = DirectDispatch(self.actors, self.completions)
        self.hubs: list = []  # per-node RolloutHub actors (aggregate)
        self._pending: dict[Hashable, int] = {}  # tickets of unfinished rollouts -> collector
        self._taken: list[Finished] = []  # finished while pausing, for the next completed()
        self.deaths = DeathLedger(num_collectors)

    @property
    def restarts(self) -> int:
        """Collector deaths recorded (each restarted by Ray), not lost rollouts."""
        return self.deaths.restarts

    def __len__(self) -> int:
        return len(self.live())

    def live(self) -> list[int]:
        """Indices of the collectors in the group (a retired index stays empty, see fleet)."""
        return [i for i, actor in enumerate(self.actors) if actor is not None]

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Blocks until every collector answers (envs built, policy ready); notes their nodes.

        With ``aggregate``, then starts one :class:`~collector.manage.hub.RolloutHub` per node that
        runs collectors, and rollouts travel through them from here on.
        """
        live = self.live()
        ray.get([self.actors[i].ping.remote() for i in live], timeout=timeout)
        nodes = ray.get([self.actors[i].node_id.remote() for i in live], timeout=timeout)
        for index, node in zip(live, nodes, strict=True):
            self.nodes[index] = node
        if self.aggregate and not self.hubs:
            self.use_hubs(*start_hubs(self.run_name, self.nodes, timeout))

    def use_hubs(self, hubs: Sequence, hub_of: Sequence[int]) -> None:
        """Sends rollouts through ``hubs`` (collector ``i`` through ``hubs[hub_of[i]]``)."""
        self.hubs = list(hubs)
        self.dispatch = HubDispatch(self.hubs, hub_of, self.completions)

    def _remember(self, weights) -> None:
        if weights is not None and (
            self.weights is None
            or (weights.generation, weights.version)
            > (self.weights.generation, self.weights.version)
        ):
            self.weights = weights

    def rollout(self, index: int, frames: int, explore=None, weights=None) -> Hashable:
        """Starts a rollout on collector ``index``; returns its ticket.

        The ticket is the receipt's ``ObjectRef`` without hubs, an integer with them (they
        leave at the next :meth:`flush`, which :meth:`completed` does first); the outcome comes
        back from :meth:`completed` under it. The newest weights seen (``weights`` or earlier)
        travel with the call only if the collector is behind (or recovering from a death).

        Raises:
            CollectorsPausedError: While the group is paused.
        """
        if self.paused:
            raise CollectorsPausedError("collectors are paused; call resume() first")
        self._remember(weights)
        weights = self.weights
        recovering = self.deaths.recovering(index)
        if weights is not None:
            key = (weights.generation, weights.version)
            if self.known_versions[index] >= key and not recovering:
                weights = None
            else:
                self.known_versions[index] = key
        ticket = self.dispatch.send(index, frames, explore, weights)
        self._pending[ticket] = index
        self.deaths.issued(ticket, index)
        return ticket

    def flush(self) -> None:
        """Sends the rollouts queued for hubs (nothing to do without hubs)."""
        self.dispatch.flush()

    def completed(self, timeout: float | None = 0) -> list[Finished]:
        """Rollouts that finished: waits up to ``timeout`` seconds for the first one.

        Costs what finished, not what is in flight. Each rollout comes back once, as a
        :class:`~collector.manage.completions.Finished` under its ticket: a receipt, or the error
        that lost it (a dead collector, an env error, a lost hub).
        """
        if self._taken:
            taken, self._taken = self._taken, []
            return taken + self._take(0)
        return self._take(timeout)

    def _take(self, timeout: float | None) -> list[Finished]:
        self.dispatch.flush()
        finished = []
        for item in self.completions.wait(timeout):
            if isinstance(item, HubDown):
                finished += self._hub_down(item)
                continue
            index = self._pending.pop(item.ticket, None)
            if index is None:
                continue  # already given up for lost with its hub
            dead = isinstance(item.error, ray.exceptions.RayActorError)
            self.deaths.answered(index, item.ticket, dead=dead)  # any other answer: it is back
            finished.append(item)
        return finished

    def _hub_down(self, down: HubDown) -> list[Finished]:
        """Every rollout sent to a dead hub is lost: its collector gets the newest weights again."""
        logger.warning("collector hub-%d died (%s); Ray restarts it", down.hub, down.error)
        self.dispatch.hub_down(down.hub)
        held = self.dispatch.held(down.hub)  # not sent yet: they wait for the restarted hub
        lost = [
            ticket
            for ticket, index in self._pending.items()
            if self.dispatch.hub_of[index] == down.hub and ticket not in held
        ]
        error = RolloutLostError(f"hub-{down.hub} died with the rollout in flight: {down.error}")
        finished = []
        for ticket in lost:
            index = self._pending.pop(ticket)
            self.known_versions[index] = (-1, -1)
            finished.append(Finished(ticket, index, error=error))
        return finished

    def inflight(self) -> int:
        """Rollouts started by this group that have not finished (succeeded or failed)."""
        self._taken += self._take(0)
        return len(self._pending)

    def pause(self, timeout: float | None = None) -> None:
        """The pause barrier: returns with no rollout in flight and every write acknowledged.

        New :meth:`rollout` calls are refused until :meth:`resume`. Rollouts that fail (a
        collector died) count as finished; their frames were never counted. Rollouts that
        finish meanwhile are kept for the next :meth:`completed`.

        Raises:
            TimeoutError: If rollouts are still running after ``timeout`` seconds (the group
                stays paused; call :meth:`pause` again or :meth:`resume`).
        """
        self.paused = True
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._pending:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"{len(self._pending)} rollouts still in flight")
            self._taken += self._take(left)
        self._each_actor("pause", timeout)

    def resume(self) -> None:
        """Ends the pause: collectors continue from where they stopped."""
        self._each_actor("resume")
        self.paused = False

    def _each_actor(self, method: str, *args) -> None:
        """Calls ``method`` on every collector; a dead one is skipped (it holds no rollout)."""
        refs = {i: getattr(self.actors[i], method).remote(*args) for i in self.live()}
        for index, ref in refs.items():
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as err:
                logger.warning("collector %d unavailable during %s: %s", index, method, err)

    def sync_weights(self, weights, timeout: float = 60.0) -> None:
        """Hands ``weights`` to every collector that is behind and waits until applied.

        A collector that is dead or restarting is skipped: it gets the newest weights with
        its next rollout.
        """
        self._remember(weights)
        refs = {}
        for index in self.live():
            if self.known_versions[index] < (weights.generation, weights.version):
                refs[index] = self.actors[index].set_weights.remote(weights)
                self.known_versions[index] = (weights.generation, weights.version)
        for index, ref in refs.items():
            try:
                ray.get(ref, timeout=timeout)
            except ray.exceptions.RayActorError as err:
                self.known_versions[index] = (-1, -1)
                logger.warning("collector-%d unavailable for weights: %s", index, err)

    def wait_alive(self, timeout: float) -> None:
        """Waits until every collector answers (one Ray is restarting comes back).

        Raises:
            TimeoutError: Naming the collectors that did not answer within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        missing = self.live()
        while missing:
            refs = {i: self.actors[i].ping.remote() for i in missing}
            for index, ref in refs.items():
                try:
                    ray.get(ref, timeout=max(deadline - time.monotonic(), 0.001))
                    missing.remove(index)
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    pass
            if missing and time.monotonic() >= deadline:
                names = ", ".join(f"collector-{i}" for i in missing)
                raise TimeoutError(f"{names} did not answer within {timeout:g} s")
            if missing:
                time.sleep(0.2)  # restarting: ask again shortly

    def mark_dead(self, index: int, ticket: Hashable | None = None) -> None:
        """Records that a rollout of collector ``index`` was lost to a dead actor.

        The collector's next rollouts re-send the newest weights (Ray restarts it with the
        initial ones). ``restarts`` counts deaths, not lost rollouts.

        Args:
            index: The collector whose rollout failed with ``RayActorError``.
            ticket: The failed rollout's ticket. With it, rollouts lost to a death already
                recorded do not count another; without it, every call counts one.
        """
        self.known_versions[index] = (-1, -1)
        self.deaths.died(index, ticket)

    def policy_versions(self) -> list[tuple[int, int]]:
        """Asks every collector which ``(generation, version)`` it holds."""
        actors = [self.actors[i] for i in self.live()]
        return ray.get([a.policy_version.remote() for a in actors], timeout=CONTROL_TIMEOUT_S)

    def state_dicts(self) -> list[dict]:
        """Every collector's state (call between :meth:`pause` and :meth:`resume`)."""
        actors = [self.actors[i] for i in self.live()]
        return ray.get([a.state_dict.remote() for a in actors], timeout=CONTROL_TIMEOUT_S)

    def load_state_dicts(self, states: Sequence[Mapping[str, Any]]) -> None:
        """Restores every collector's state; envs restart on fresh, re-seeded episodes.

        Raises:
            ValueError: If the number of states differs from the number of collectors, or a
                state belongs to another collector.
        """
        actors = [self.actors[i] for i in self.live()]
        if len(states) != len(actors):
            raise ValueError(f"states: expected {len(actors)}, got {len(states)}")
        refs = [a.load_state_dict.remote(s) for a, s in zip(actors, states, strict=True)]
        ray.get(refs, timeout=CONTROL_TIMEOUT_S)

    def shutdown(self) -> None:
        """Kills every collector actor (and hub)."""
        self.dispatch.close()
        for actor in [*self.hubs, *(a for a in self.actors if a is not None)]:
            ray.kill(actor, no_restart=True)
