"""CollectorGroup: starts, addresses, pauses, restores and restarts the collector actors."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import ray

from collector.actor import CONCURRENCY_GROUPS, ROLLOUT_CONCURRENCY, Collector
from collector.config import INLINE_WRITE_ENV, inherits_inline_writes

logger = logging.getLogger(__name__)

# Longest wait for a collector's control call (state, versions, restore): every remote call the
# driver waits on has a timeout, so a stuck collector fails the call instead of hanging the run.
CONTROL_TIMEOUT_S = 300.0

# Recent rollouts whose issue-time death count is remembered (for mark_dead's dedup).
ISSUED_MEMORY = 4096


class CollectorsPausedError(RuntimeError):
    """A rollout was asked of a paused CollectorGroup."""


def remote_collector(
    run_name: str,
    collector_id: int,
    *args,
    num_cpus: float = 1.0,
    max_restarts: int = 3,
    scheduling_strategy=None,
    **kwargs,
) -> ray.actor.ActorHandle:
    """Starts a named Collector actor ``<run>.collector-<i>`` in namespace ``relayrl``.

    ``args`` and ``kwargs`` are :class:`collector.actor.Collector`'s after ``collector_id``. The
    actor gets its rollout threads (pipelined writes), its control threads, and sends replay
    writes of up to ``INLINE_WRITE_BYTES`` inline (Ray's ``max_direct_call_object_size``, set
    for this actor's process only). ``run_name`` is the run id; ``scheduling_strategy`` (e.g. a
    bundle of the run's placement group) defaults to Ray's.
    """
    actor_cls = ray.remote(
        max_concurrency=ROLLOUT_CONCURRENCY, concurrency_groups=CONCURRENCY_GROUPS
    )(Collector).options(
        name=f"{run_name}.collector-{collector_id}",
        namespace="relayrl",
        num_cpus=num_cpus,
        max_restarts=max_restarts,
        max_task_retries=0,
        runtime_env=None if inherits_inline_writes() else {"env_vars": INLINE_WRITE_ENV},
        scheduling_strategy=scheduling_strategy,
    )
    return actor_cls.remote(collector_id, *args, **kwargs)


class CollectorGroup:
    """``num_collectors`` named Collector actors, restarted by Ray when they die.

    Actors are named ``<run>.collector-<i>`` in namespace ``relayrl``. A collector that dies is
    restarted by Ray (``max_restarts``); its in-flight rollouts fail with ``RayActorError`` and
    are not counted by the driver, which calls :meth:`mark_dead`; the group then re-sends the
    newest weights it has seen with that collector's next rollout.

    Pause barrier: :meth:`pause` refuses new rollouts, waits until every rollout this group
    started has finished (a finished rollout's write is acknowledged: receipts come back only
    after their writes), then pauses each actor; :meth:`resume` undoes it. The driver should
    drain the receipts of the refs it holds after :meth:`pause` returns.

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
        scheduling: One scheduling strategy per collector (e.g. bundles of the run's placement
            group); None entries or None: Ray's default. A restarted collector keeps its own.

    Examples:
        >>> group = CollectorGroup("run", 2, "CartPole-v1", 8, spec, shards, 0)  # doctest: +SKIP
        >>> receipt = ray.get(group.rollout(0, 1024, {"epsilon": 0.1}))  # doctest: +SKIP
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
        scheduling: Sequence | None = None,
    ) -> None:
        scheduling = list(scheduling) if scheduling is not None else [None] * num_collectors
        self.actors = [
            remote_collector(
                run_name,
                i,
                env_id,
                envs_per_collector,
                model_spec,
                list(shards),
                seed,
                vector_mode,
                num_cpus=num_cpus,
                max_restarts=max_restarts,
                env_kwargs=dict(env_kwargs or {}),
                n_step=n_step,
                gamma=gamma,
                transform=transform,
                frame_stack=frame_stack,
                scheduling_strategy=scheduling[i],
            )
            for i in range(num_collectors)
        ]
        # (generation, version) each collector is known to hold; reset when one dies.
        self.known_versions = [(-1, -1)] * num_collectors
        self.weights = None  # the newest PublishedWeights seen
        self.restarts = 0
        self.nodes: list[str | None] = [None] * num_collectors  # Ray node ids, for messages
        self.paused = False
        self._inflight: set[ray.ObjectRef] = set()
        # Restart accounting. Ray fails every rollout sent to a collector between its death and
        # its restart, so one death shows up as several failures. A failure counts a new death
        # only if its rollout was issued after the collector had answered again since the last
        # recorded death; until it has, rollouts carry the newest weights unconditionally.
        self._deaths = [0] * num_collectors
        self._recovering: list[list[ray.ObjectRef] | None] = [None] * num_collectors
        self._issued: collections.OrderedDict[bytes, int] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self.actors)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Blocks until every collector answers (envs built, policy ready); notes their nodes."""
        ray.get([a.ping.remote() for a in self.actors], timeout=timeout)
        self.nodes = ray.get([a.node_id.remote() for a in self.actors], timeout=timeout)

    def _remember(self, weights) -> None:
        if weights is not None and (
            self.weights is None
            or (weights.generation, weights.version)
            > (self.weights.generation, self.weights.version)
        ):
            self.weights = weights

    def rollout(self, index: int, frames: int, explore=None, weights=None) -> ray.ObjectRef:
        """Starts a rollout on collector ``index``; returns the reference of its receipt.

        The newest weights seen (``weights`` or earlier ones) travel with the call only if the
        collector is behind (or is recovering from a death).

        Raises:
            CollectorsPausedError: While the group is paused.
        """
        if self.paused:
            raise CollectorsPausedError("collectors are paused; call resume() first")
        self._remember(weights)
        weights = self.weights
        recovering = self._recovering[index] is not None and not self._recovered(index)
        if weights is not None:
            key = (weights.generation, weights.version)
            if self.known_versions[index] >= key and not recovering:
                weights = None
            else:
                self.known_versions[index] = key
        ref = self.actors[index].rollout.remote(frames, explore, weights)
        if len(self._inflight) >= 4 * len(self.actors):
            self._prune()
        self._inflight.add(ref)
        self._issued[ref.binary()] = self._deaths[index] - 1 if recovering else self._deaths[index]
        if len(self._issued) > ISSUED_MEMORY:
            self._issued.popitem(last=False)
        if recovering:
            self._recovering[index].append(ref)
        return ref

    def _recovered(self, index: int) -> bool:
        """Whether a rollout issued since collector ``index``'s last recorded death came back."""
        refs = self._recovering[index]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            refs.remove(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                continue
            except Exception:  # any answer but a dead actor's means it is back
                pass
            self._recovering[index] = None
            return True
        return False

    def _prune(self) -> None:
        refs = list(self._inflight)
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        self._inflight.difference_update(done)

    def inflight(self) -> int:
        """Rollouts started by this group that have not finished (succeeded or failed)."""
        self._prune()
        return len(self._inflight)

    def pause(self, timeout: float | None = None) -> None:
        """The pause barrier: returns with no rollout in flight and every write acknowledged.

        New :meth:`rollout` calls are refused until :meth:`resume`. Rollouts that fail (a
        collector died) count as finished; their frames were never counted.

        Raises:
            TimeoutError: If rollouts are still running after ``timeout`` seconds (the group
                stays paused; call :meth:`pause` again or :meth:`resume`).
        """
        self.paused = True
        refs = list(self._inflight)
        if refs:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)
            self._inflight.difference_update(done)
            if self._inflight:
                raise TimeoutError(f"{len(self._inflight)} rollouts still in flight")
        self._each_actor("pause", timeout)

    def resume(self) -> None:
        """Ends the pause: collectors continue from where they stopped."""
        self._each_actor("resume")
        self.paused = False

    def _each_actor(self, method: str, *args) -> None:
        """Calls ``method`` on every collector; a dead one is skipped (it holds no rollout)."""
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        for index, ref in enumerate(refs):
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
        for index, actor in enumerate(self.actors):
            if self.known_versions[index] < (weights.generation, weights.version):
                refs[index] = actor.set_weights.remote(weights)
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
        missing = list(range(len(self.actors)))
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

    def mark_dead(self, index: int, ref: ray.ObjectRef | None = None) -> None:
        """Records that a rollout of collector ``index`` was lost to a dead actor.

        The collector's next rollouts re-send the newest weights (Ray restarts it with the
        initial ones). ``restarts`` counts deaths, not lost rollouts.

        Args:
            index: The collector whose rollout failed with ``RayActorError``.
            ref: The failed rollout's reference. With it, rollouts lost to a death already
                recorded do not count another; without it, every call counts one.
        """
        self.known_versions[index] = (-1, -1)
        issued_under = self._issued.pop(ref.binary(), None) if ref is not None else None
        if issued_under is not None and issued_under < self._deaths[index]:
            return
        self._deaths[index] += 1
        self.restarts += 1
        self._recovering[index] = []

    def policy_versions(self) -> list[tuple[int, int]]:
        """Asks every collector which ``(generation, version)`` it holds."""
        return ray.get([a.policy_version.remote() for a in self.actors], timeout=CONTROL_TIMEOUT_S)

    def state_dicts(self) -> list[dict]:
        """Every collector's state (call between :meth:`pause` and :meth:`resume`)."""
        return ray.get([a.state_dict.remote() for a in self.actors], timeout=CONTROL_TIMEOUT_S)

    def load_state_dicts(self, states: Sequence[Mapping[str, Any]]) -> None:
        """Restores every collector's state; envs restart on fresh, re-seeded episodes.

        Raises:
            ValueError: If the number of states differs from the number of collectors, or a
                state belongs to another collector.
        """
        if len(states) != len(self.actors):
            raise ValueError(f"states: expected {len(self.actors)}, got {len(states)}")
        refs = [a.load_state_dict.remote(s) for a, s in zip(self.actors, states, strict=True)]
        ray.get(refs, timeout=CONTROL_TIMEOUT_S)

    def shutdown(self) -> None:
        """Kills every collector actor."""
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
