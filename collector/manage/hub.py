"""Per-node aggregation of rollouts: one hub actor per node between the driver and its collectors.

One Ray call costs the driver about as much CPU as a few hundred receipts' worth of counting
(``docs/benchmarks.md``), so a driver that calls every collector itself saturates long before a
fleet of a thousand collectors does. Past ``collector.aggregate_min_collectors`` collectors the
:class:`~collector.manage.group.CollectorGroup` starts a :class:`RolloutHub` on each node that runs
collectors, and rollouts travel through it:

    driver --submit(orders)--> hub --rollout()--> each collector on its node
    driver <--collect()------- hub <--receipt---- (every receipt that finished since the last)

The driver sends each hub the rollouts it issued since its last wait in one ``submit`` call and
keeps one ``collect`` call in flight per hub, which returns every rollout that finished since
the previous one: under load each Ray call carries many receipts, at low rates a receipt
travels alone, without waiting for company. The rollouts issued on a hub's receipts usually
leave with its next collect (``exchange``: one call, not two). Receipts pass through whole and are
counted by the driver one by one, so frame accounting stays exact; a rollout's error (a dead
collector, an env error) passes through the same way.

A hub holds no state worth keeping: Ray restarts a dead one (without limit). The rollouts it
held when it died come back as :class:`RolloutLostError` (not counted, like those of a dead
collector): the driver learns of it in order, after every receipt the hub had delivered.

Examples:
    >>> hub = remote_hub("run", 0, node_id)  # doctest: +SKIP
    >>> order = (0, 3, 256, {"epsilon": 0.1}, None)  # ticket, collector, frames, explore, weights
    >>> hub.submit.remote([order])  # doctest: +SKIP
    >>> finished = ray.get(hub.collect.remote())  # [Finished(0, 3, receipt)]  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
from collections.abc import Sequence

import ray

from collector.manage.completions import Completions, Finished

# (ticket, collector index, frames, exploration, weights or None)
Order = tuple[int, int, int, object, object]

# Seconds a collect waits after the first rollout finished, for company: each driver call then
# carries more receipts, for a delay that is small against a rollout's time.
LINGER_S = 0.002


class RolloutLostError(RuntimeError):
    """A rollout whose hub died before it returned: not counted (its write may be stored)."""


@dataclasses.dataclass(frozen=True)
class HubDown:
    """A queue entry: hub ``hub``'s collect failed; every rollout it still held is lost.

    Attributes:
        hub: The hub's index.
        error: Why (the failed call's error).
    """

    hub: int
    error: BaseException


class RolloutHub:
    """Forwards rollout orders to the collectors of its node and returns receipts in batches.

    Args:
        run_name: The run id (collectors are ``<run>.collector-<i>`` in namespace ``relayrl``).
    """

    def __init__(self, run_name: str) -> None:
        self.run_name = run_name
        self._collectors: dict[int, ray.actor.ActorHandle] = {}
        self._done: list[Finished] = []
        self._ready: asyncio.Event | None = None
        self._tasks: set[asyncio.Task] = set()

    def _event(self) -> asyncio.Event:
        if self._ready is None:  # created on the actor's event loop
            self._ready = asyncio.Event()
        return self._ready

    def _finished(self, finished: Finished) -> None:
        """A rollout finished: kept for the next :meth:`collect`."""
        self._done.append(finished)
        self._event().set()

    def _collector(self, index: int) -> ray.actor.ActorHandle:
        handle = self._collectors.get(index)
        if handle is None:  # looked up by name: a restarted hub finds restarted collectors
            handle = ray.get_actor(f"{self.run_name}.collector-{index}", namespace="relayrl")
            self._collectors[index] = handle
        return handle

    async def submit(self, orders: Sequence[Order]) -> int:
        """Starts each ordered rollout on its collector; returns how many were started."""
        for ticket, index, frames, explore, weights in orders:
            ref = self._collector(index).rollout.remote(frames, explore, weights)
            task = asyncio.ensure_future(self._deliver(ticket, index, ref))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(orders)

    async def _deliver(self, ticket: int, index: int, ref: ray.ObjectRef) -> None:
        try:
            finished = Finished(ticket, index, receipt=await ref)
        except Exception as err:  # a dead collector, an env error: the driver decides
            finished = Finished(ticket, index, error=err)
        self._finished(finished)

    async def collect(self) -> list[Finished]:
        """Waits until a rollout finished, then returns every one that finished since last time.

        After the first, it waits ``LINGER_S`` for more.
        """
        ready = self._event()
        await ready.wait()
        await asyncio.sleep(LINGER_S)
        ready.clear()
        done, self._done = self._done, []
        return done

    async def exchange(self, orders: Sequence[Order]) -> list[Finished]:
        """:meth:`submit` then :meth:`collect` in one call (one driver call instead of two)."""
        await self.submit(orders)
        return await self.collect()

    def ping(self) -> bool:
        """Liveness probe."""
        return True


def remote_hub(run_name: str, index: int, node_id: str | None) -> ray.actor.ActorHandle:
    """Starts hub ``<run>.hub-<index>`` on node ``node_id`` (soft affinity; no CPU reserved)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = NodeAffinitySchedulingStrategy(node_id, soft=True) if node_id else None
    return (
        ray.remote(RolloutHub)
        .options(
            name=f"{run_name}.hub-{index}",
            namespace="relayrl",
            num_cpus=0,
            max_restarts=-1,
            scheduling_strategy=strategy,
        )
        .remote(run_name)
    )


def start_hubs(run_name: str, nodes: Sequence[str | None], timeout: float) -> tuple[list, list]:
    """One hub per node of ``nodes`` (each collector's node), once each answers.

    Returns:
        The hubs, and the index of each collector's hub.
    """
    index = {node: i for i, node in enumerate(dict.fromkeys(nodes))}
    hubs = [remote_hub(run_name, i, node) for node, i in index.items()]
    ray.get([hub.ping.remote() for hub in hubs], timeout=timeout)
    return hubs, [index[node] for node in nodes]


class HubDispatch:
    """The driver's side of the hubs: orders batched per hub, receipts into a queue.

    Args:
        hubs: Hub actor handles (or actors with the same ``submit``, ``collect`` and
            ``exchange`` methods).
        hub_of: The hub of each collector, by collector index.
        completions: Where finished rollouts go.
    """

    def __init__(self, hubs: Sequence, hub_of: Sequence[int], completions: Completions) -> None:
        self.hubs = list(hubs)
        self.hub_of = list(hub_of)
        self.completions = completions
        self._orders: dict[int, list[Order]] = {}  # hub -> orders not sent yet
        self._tickets = itertools.count()
        # Hubs without a collect call in flight: appended by Ray's callback thread when one
        # returns, taken by the driver thread (deque appends and pops are thread-safe).
        self._idle = collections.deque(range(len(self.hubs)))
        self._down: set[int] = set()  # hubs being restarted: their orders wait
        self._closed = False

    def send(self, index: int, frames: int, explore, weights) -> int:
        """Queues a rollout for collector ``index``; returns its ticket (sent by :meth:`flush`)."""
        ticket = next(self._tickets)
        order = (ticket, index, frames, explore, weights)
        self._orders.setdefault(self.hub_of[index], []).append(order)
        return ticket

    def flush(self) -> None:
        """Sends the queued orders (one call per hub) and keeps a collect in flight per hub.

        Costs the hubs that have orders or a finished collect, not every hub.
        """
        orders, self._orders = self._orders, {}
        for hub in self._down & orders.keys():  # held until the hub answers again
            self._orders[hub] = orders.pop(hub)
        idle = set()
        while self._idle:
            idle.add(self._idle.popleft())
        for hub, batch in orders.items():
            if hub in idle:  # its next collect carries the orders: one call, not two
                idle.discard(hub)
                ref = self.hubs[hub].exchange.remote(batch)
                ref.future().add_done_callback(lambda fut, h=hub: self._collected(fut, h))
            else:
                ref = self.hubs[hub].submit.remote(batch)
                ref.future().add_done_callback(lambda fut, b=batch: self._submitted(fut, b))
        for hub in idle:
            ref = self.hubs[hub].collect.remote()
            ref.future().add_done_callback(lambda fut, h=hub: self._collected(fut, h))

    def _submitted(self, future, orders: list[Order]) -> None:
        """Runs on Ray's callback thread: orders a dead hub never took come back lost."""
        error = future.exception()
        if error is not None and not self._closed:
            lost = RolloutLostError(f"hub of collector {orders[0][1]} died: {error}")
            self.completions.put([Finished(o[0], o[1], error=lost) for o in orders])

    def _collected(self, future, hub: int) -> None:
        """Runs on Ray's callback thread: passes a batch on (a failed collect: a lost hub)."""
        error = future.exception()
        if self._closed:
            return
        if error is not None:
            self._down.add(hub)  # no collect until it answers (see hub_down)
            self.completions.put([HubDown(hub, error)])
            return
        self._idle.append(hub)  # the driver thread sends the next collect
        self.completions.put(future.result())

    def held(self, hub: int) -> set[int]:
        """Tickets queued for ``hub`` and not sent yet."""
        return {order[0] for order in self._orders.get(hub, ())}

    def hub_down(self, hub: int) -> None:
        """The driver took a :class:`HubDown`: probe the hub until Ray has restarted it.

        Meanwhile its orders wait; once it answers, collects and orders flow again.
        """
        ref = self.hubs[hub].ping.options(max_task_retries=-1).remote()
        ref.future().add_done_callback(lambda _: self._back(hub))

    def _back(self, hub: int) -> None:
        self._down.discard(hub)
        self._idle.append(hub)
        self.completions.put(())  # wakes the driver: held orders can leave

    def close(self) -> None:
        """Stops passing results on (the hubs are about to be killed)."""
        self._closed = True
