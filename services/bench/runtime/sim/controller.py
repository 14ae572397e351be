"""A simulated fleet for ``services.bench scale``: the real driver against programmed services.

The driver under test is the production one: :class:`SimulatedController` is a
:class:`~services.driver.controller.Controller` whose :meth:`~SimulatedController.setup` starts
simulated services instead of real ones, and nothing else; its loops, receipt handling,
accounting, fault checks, hooks and metrics are the shipped code. What is simulated answers
with real messages at programmed rates (the actors are in :mod:`services.bench.runtime.sim.fleet`):

    * :class:`SimulatedCollectors`: the production :class:`~collector.manage.group.CollectorGroup`
      (rollout issue, weights hand-off, restart ledger, dispatch direct or through hubs) over
      many logical collectors per :class:`~services.bench.runtime.sim.fleet.SimNode`, so a thousand
      fit on a small machine; each node is its collectors' hub.
    * :class:`SimulatedLearners`: the learner group's driver-side interface over one
      :class:`~services.bench.runtime.sim.fleet.SimLearner`, its step receipts checked by the
      production ``verify_receipts``.
    * :class:`~services.bench.runtime.sim.fleet.SimShard` answers the driver's health checks and
      stats through the production ``ReplayClient``.
"""

from __future__ import annotations

import dataclasses

import ray

from collector.manage.group import CollectorGroup
from learner.ranks.group import PendingRound
from learner.receipts import PublishedWeights, StepReceipt, verify_receipts
from replay.client import ReplayClient
from services.bench.runtime.sim.fleet import Program, SimLearner, SimNode, SimShard
from services.driver.controller import Controller


class _Method:
    def __init__(self, node, name: str, index: int) -> None:
        self.node, self.name, self.index = node, name, index

    def remote(self, *args):
        return getattr(self.node, self.name).remote(self.index, *args)


class LogicalCollector:
    """What the group calls of one collector, answered by its :class:`SimNode`."""

    def __init__(self, node, index: int) -> None:
        self.rollout = _Method(node, "rollout", index)


class SimulatedCollectors(CollectorGroup):
    """The production collector group over ``num_collectors`` logical collectors.

    Args:
        run_name: The run id.
        num_collectors: Logical collectors.
        per_node: Collectors per :class:`SimNode` (one node: one hub).
        program: What they do.

    Keyword Args:
        aggregate: Rollouts through the nodes' hubs (else one call per rollout).
    """

    def __init__(
        self, run_name: str, num_collectors: int, per_node: int, program: Program, *, aggregate
    ) -> None:
        starts = range(0, num_collectors, per_node)
        node_cls = ray.remote(num_cpus=0)(SimNode)
        self.sim_nodes = [
            node_cls.remote(first, min(per_node, num_collectors - first), program)
            for first in starts
        ]
        self.node_of = [i // per_node for i in range(num_collectors)]
        self.actors = [
            LogicalCollector(self.sim_nodes[self.node_of[i]], i) for i in range(num_collectors)
        ]
        self._init_state(run_name, aggregate=aggregate)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Every node answers; with ``aggregate`` the nodes are the hubs."""
        names = ray.get([node.node_id.remote() for node in self.sim_nodes], timeout=timeout)
        self.nodes = [names[node] for node in self.node_of]
        if self.aggregate:
            self.use_hubs(self.sim_nodes, self.node_of)

    def sync_weights(self, weights, timeout: float = 60.0) -> None:
        """Hands ``weights`` to every collector that is behind (one call per node)."""
        self._remember(weights)
        key = (weights.generation, weights.version)
        behind: dict[int, list[int]] = {}
        for index, known in enumerate(self.known_versions):
            if known < key:
                behind.setdefault(self.node_of[index], []).append(index)
                self.known_versions[index] = key
        refs = [self.sim_nodes[n].set_weights.remote(weights, i) for n, i in behind.items()]
        ray.get(refs, timeout=timeout)

    def policy_versions(self) -> list[tuple[int, int]]:
        """Every collector's ``(generation, version)``."""
        per_node = ray.get([node.policy_versions.remote() for node in self.sim_nodes])
        return [version for versions in per_node for version in versions]

    def delivered(self) -> dict:
        """Rollouts and frames the nodes delivered, and older weights they ignored."""
        totals = {"rollouts": 0, "frames": 0, "stale_weights": 0}
        for stats in ray.get([node.stats.remote() for node in self.sim_nodes]):
            for key in totals:
                totals[key] += stats[key]
        return totals

    def shutdown(self) -> None:
        """Kills the nodes."""
        self.dispatch.close()
        for node in self.sim_nodes:
            ray.kill(node, no_restart=True)


class SimulatedLearners:
    """The learner group's driver-side interface over one :class:`SimLearner`.

    Args:
        round_s: Seconds of one round.
        generation: The learner generation.
    """

    def __init__(self, round_s: float, generation: int = 0) -> None:
        self.actor = ray.remote(num_cpus=0)(SimLearner).remote(round_s)
        self.generation, self.version, self.round_id = generation, 0, 0
        ray.get(self.actor.ping.remote(), timeout=120)  # started, like a real group's ranks

    def start_round(self, num_steps: int, *, publish: bool = True, beta=None, epochs=None):
        """Sends a round (one at a time)."""
        self.round_id += 1
        receipt, weights = self.actor.step.options(num_returns=2).remote(
            self.round_id, num_steps, self.generation
        )
        expected = self.version + num_steps
        return PendingRound(
            self.round_id, num_steps, expected, (receipt,), self.generation, weights
        )

    def finish_round(self, pending: PendingRound) -> StepReceipt:
        """The round's receipt, checked like a real group's."""
        receipts = ray.get(list(pending.refs), timeout=60)
        receipt = verify_receipts(
            receipts,
            generation=self.generation,
            round_id=pending.round_id,
            expected_version=pending.expected_version,
            optim_steps=pending.num_steps,
        )
        self.version = receipt.model_version
        published = PublishedWeights(self.generation, self.version, pending.weights)
        return dataclasses.replace(receipt, published=published)

    def publish(self) -> PublishedWeights:
        """The weights of the current version."""
        return PublishedWeights(self.generation, self.version, ray.put({"version": self.version}))

    def flush_replay(self) -> None:
        """Nothing to flush."""

    def shutdown(self) -> None:
        """Kills the learner."""
        ray.kill(self.actor, no_restart=True)


class SimulatedController(Controller):
    """The production controller; only :meth:`setup` starts simulated services.

    Args:
        config: The run's configuration (``collector.num_collectors`` logical collectors).
        program: What the simulated services do.

    Keyword Args:
        per_node: Logical collectors per simulated node.
        aggregate: Rollouts through the nodes' hubs (else one driver call per rollout).
    """

    def __init__(self, config, program: Program, *, per_node: int, aggregate: bool) -> None:
        super().__init__(config, model_spec=program)  # the spec is never built
        self.program = program
        self.per_node = per_node
        self.aggregate = aggregate

    def setup(self) -> None:
        """Starts the simulated shards, collectors and learner, then the production begin."""
        cfg = self.config
        shard_cls = ray.remote(num_cpus=0)(SimShard)
        self.shards = [shard_cls.remote(i) for i in range(cfg.replay.num_shards)]
        self.replay = ReplayClient(self.shards, seed=cfg.seed)
        self.recovery.watch_shards(self.shards)
        self.collectors = SimulatedCollectors(
            self.run_id,
            cfg.collector.num_collectors,
            self.per_node,
            self.program,
            aggregate=self.aggregate,
        )
        self.collectors.wait_ready()
        self.learners = SimulatedLearners(self.program.round_s, self.counters.generation)
        self.begin()
