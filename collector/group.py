"""CollectorGroup: starts, addresses and restarts the collector actors."""

from __future__ import annotations

from collections.abc import Sequence

import ray

from collector.actor import Collector
from collector.policy import ModelSpec


class CollectorGroup:
    """``num_collectors`` named Collector actors, restarted by Ray when they die.

    Actors are named ``<run>.collector-<i>`` in namespace ``relayrl``. A collector that dies is
    restarted by Ray (``max_restarts``); its in-flight rollout fails with ``RayActorError`` and
    is not counted by the driver, which then re-sends the newest weights (see :meth:`mark_dead`).

    Args:
        run_name: The run's name, used in actor names.
        num_collectors: Number of collector actors.
        env_id: Gymnasium id.
        envs_per_collector: Sub-envs per collector.
        model_spec: Q-network architecture.
        shards: Replay shard handles.
        seed: Run seed.
        num_cpus: Logical CPUs per collector.
        max_restarts: Restarts Ray grants each collector.
        vector_mode: ``"sync"`` or ``"async"`` vector env.
    """

    def __init__(
        self,
        run_name: str,
        num_collectors: int,
        env_id: str,
        envs_per_collector: int,
        model_spec: ModelSpec,
        shards: Sequence[ray.actor.ActorHandle],
        seed: int,
        *,
        num_cpus: float = 1.0,
        max_restarts: int = 3,
        vector_mode: str = "sync",
    ) -> None:
        actor_cls = ray.remote(Collector)
        self.actors = [
            actor_cls.options(
                name=f"{run_name}.collector-{i}",
                namespace="relayrl",
                num_cpus=num_cpus,
                max_restarts=max_restarts,
                max_task_retries=0,
            ).remote(i, env_id, envs_per_collector, model_spec, list(shards), seed, vector_mode)
            for i in range(num_collectors)
        ]
        # (generation, version) each collector is known to hold; reset when one dies.
        self.known_versions = [(-1, -1)] * num_collectors
        self.restarts = 0

    def __len__(self) -> int:
        return len(self.actors)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Blocks until every collector answers (envs built, policy ready)."""
        ray.get([a.ping.remote() for a in self.actors], timeout=timeout)

    def rollout(self, index: int, frames: int, epsilon: float, weights=None) -> ray.ObjectRef:
        """Starts a rollout on collector ``index``, passing ``weights`` only if it is behind."""
        if weights is not None and self.known_versions[index] >= (
            weights.generation,
            weights.version,
        ):
            weights = None
        if weights is not None:
            self.known_versions[index] = (weights.generation, weights.version)
        return self.actors[index].rollout.remote(frames, epsilon, weights)

    def sync_weights(self, weights, timeout: float = 60.0) -> None:
        """Hands ``weights`` to every collector that is behind and waits until applied."""
        refs = []
        for index, actor in enumerate(self.actors):
            if self.known_versions[index] < (weights.generation, weights.version):
                refs.append(actor.set_weights.remote(weights))
                self.known_versions[index] = (weights.generation, weights.version)
        ray.get(refs, timeout=timeout)

    def mark_dead(self, index: int) -> None:
        """Records that collector ``index`` died; its next rollout re-sends the weights."""
        self.known_versions[index] = (-1, -1)
        self.restarts += 1

    def policy_versions(self) -> list[tuple[int, int]]:
        """Asks every collector which ``(generation, version)`` it holds."""
        return ray.get([a.policy_version.remote() for a in self.actors])

    def shutdown(self) -> None:
        """Kills every collector actor."""
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
