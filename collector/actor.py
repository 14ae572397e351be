"""The Collector Ray actor: a thin shell over a pure worker (``collector.rollout`` and kin).

Its jobs live in plain modules: the weights in use and their ``(generation, version)`` in
:mod:`collector.weights`, the writer id, sequence numbers and the acknowledgement with failover
to the next shard in :mod:`collector.delivery`, the pause barrier and the saved-state format in
:mod:`collector.control`. The actor holds the threads: its rollout calls, its control calls and
the one stepper thread that runs every rollout's serial work.

Pipelining: the actor runs two rollout calls at once (``ROLLOUT_CONCURRENCY``) and one stepper
thread. A rollout call fetches newer weights it was handed (while the stepper still steps the
previous rollout), then hands its work to the stepper, which in one go applies them, steps the
envs, takes the sequence number and sends the replay write (so writes leave in sequence order);
the call then waits for the write's acknowledgement while the stepper already steps the next
rollout. A receipt is returned only after its write is acknowledged, so a counted rollout is
always stored.

Why one stepper thread that also sends: every time another Python thread of the process takes
the GIL while the envs are being stepped, the stepping thread loses the GIL and waits to get it
back, so even a helper thread that merely wakes now and then slows a raw stepping loop. When
rollout threads serialized writes concurrently with stepping, the stepping thread was switched
out often; doing that work on the stepper, between rollouts, leaves few switches (the figures are
in ``docs/benchmarks.md``, "Design measurements"). A weights fetch is mostly a wait for the
object's owner (the GIL released) and happens at most once per publication, so it runs on the
rollout call's thread: with short rollouts (the asynchronous loop's chunks, a publication every
few rollouts) fetching on the stepper cost the collectors up to a tenth of their time. Small
replay writes also skip the object store (see ``collector.config.INLINE_WRITE_BYTES``).

What remains: in a threaded actor, Ray's main thread takes the GIL every 10 ms to check for
signals (``CoreWorker.CheckSignal``), so a raw loop runs a little slower than in a plain actor,
which could neither overlap write acknowledgements with stepping nor answer control calls.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import ray
import torch

from collector.chunks import ChunkWorker
from collector.control import STATE_FORMAT, PauseBarrier, check_state
from collector.delivery import ReplayWriter, SentRollout
from collector.envs.images import frame_key_of, images_of
from collector.envs.spaces import observation_keys_of
from collector.envs.vector import EnvError, env_seeds, make_vector_env
from collector.niceness import renice_process
from collector.onpolicy import OnPolicyTransform, OnPolicyWorker
from collector.receipts import RolloutReceipt
from collector.rollout import RolloutWorker
from collector.sequence_worker import SequenceLayout, SequenceWorker
from collector.weights import PolicyWeights
from replay.client import ReplayClient

logger = logging.getLogger(__name__)

# Rollout calls an actor runs at once: one steps while the previous one waits for its write ack.
ROLLOUT_CONCURRENCY = 2
# Control calls (pause, resume, weights, state) run in their own threads, never behind rollouts.
CONCURRENCY_GROUPS = {"control": 2}


def _shard_handle(shard):
    """A shard's handle from its handle or actor name (None: no such actor any more)."""
    if not isinstance(shard, str):
        return shard
    try:
        return ray.get_actor(shard, namespace="relayrl")
    except ValueError:
        return None


class Collector:
    """Steps ``num_envs`` environments with the newest weights it was given and writes to replay.

    Each instance is one writer of the replay service. Its writer id carries an incarnation
    token, so a restarted collector (whose sequence numbers start again at 0) is never mistaken
    for a retry of its predecessor. Start it with :func:`collector.manage.group.remote_collector`
    (or ``CollectorGroup``) so the rollout and control threads exist; called directly it is a plain
    object (tests drive it so).

    Args:
        collector_id: Index of this collector; writes go to shard ``collector_id % num_shards``.
        env_id: Gymnasium id or ``module:function`` env factory.
        num_envs: Sub-environments stepped in one vector env.
        model_spec: Network spec (``ModelSpec`` for DQN, ``ActorCriticSpec`` for PPO, A2C and
            REINFORCE, ``SquashedGaussianSpec`` for SAC, ``collector.networks.agents.AgentQSpec``
            for IQL, VDN and QMIX). A spec with ``make_vector_env`` builds the envs (same
            arguments as :func:`collector.envs.vector.make_vector_env`).
        shards: Replay shard handles, or their actor names in namespace ``relayrl`` (preferred:
            restartable actors should not hold handles in their constructor arguments).
        seed: Run seed; env, exploration and init seeds are derived from it and ``collector_id``.
        vector_mode: ``"sync"`` or ``"async"``.

    Keyword Args:
        env_kwargs: Keyword arguments of the env (``gymnasium.make`` or the factory).
        n_step: Steps per transition window (off-policy transitions).
        gamma: Discount of the n-step returns.
        transform: An :class:`OnPolicyTransform` makes this an on-policy collector
            (``SAME_STEP`` envs, fixed-length or whole-episode rollouts with advantages, see
            ``collector.onpolicy``); None keeps off-policy n-step transitions.
        frame_stack: Write observations as frame streams for a frame-deduplicated replay
            (``replay.frames``; 0: stacked observations as they are).
        action_mask_key: Where the env reports action masks, an observation key or an ``info``
            key (``collector.action_mask_key``, ``collector.envs.masks``); None: no masks.
        sequences: Write sequences, not n-step transitions (``collector.sequence_worker``).
        generation: The run's learner generation when this collector starts: 0 for a run's
            first collectors; a collector added to a running run, or started by a run resumed
            at another size, seeds its envs, exploration and torch from it too, so no two
            collectors of a run's lineage share a stream (``collector.manage.fleet``).
    """

    def __init__(
        self,
        collector_id: int,
        env_id: str,
        num_envs: int,
        model_spec,
        shards: Sequence[ray.actor.ActorHandle | str],
        seed: int,
        vector_mode: str = "sync",
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        n_step: int = 1,
        gamma: float = 0.99,
        transform: OnPolicyTransform | None = None,
        frame_stack: int = 0,
        action_mask_key: str | None = None,
        generation: int = 0,
        sequences: SequenceLayout | None = None,
        nice: int = 0,
    ) -> None:
        renice_process(nice)  # before any thread of ours starts: they inherit it
        torch.set_num_threads(1)
        self.collector_id = collector_id
        self.seed = seed
        self.generation = generation
        # Shards given by name are looked up here: Ray cannot restart an actor whose constructor
        # arguments hold actor handles if those go out of scope, and it warns about it.
        # A shard removed by a live resize is gone: a collector Ray restarts later skips it.
        handles = [h for h in map(_shard_handle, shards) if h is not None]
        self.writer = ReplayWriter(ReplayClient(handles), collector_id)
        torch.manual_seed(seed * 7919 + collector_id + generation * 1_000_003)
        self.weights = PolicyWeights(model_spec.build().eval())
        policy_entropy = [seed, collector_id, 1] + ([generation, 0x51] if generation else [])
        self.policy = model_spec.make_policy(
            self.weights.network, np.random.SeedSequence(policy_entropy)
        )
        seeds = env_seeds(seed, collector_id, num_envs, generation=generation)
        self.env_id = env_id
        if hasattr(model_spec, "make_vector_env"):
            # A spec whose policy needs another env interface (multi-agent) builds the envs.
            make = model_spec.make_vector_env
            masks = {"action_mask_key": action_mask_key} if action_mask_key else {}
            self._make_envs = functools.partial(
                make, env_id, num_envs, mode=vector_mode, env_kwargs=env_kwargs, **masks
            )
        else:
            self._make_envs = functools.partial(
                make_vector_env,
                env_id,
                num_envs,
                mode=vector_mode,
                env_kwargs=env_kwargs,
                observation_keys=observation_keys_of(model_spec),
                images=images_of(model_spec),
                autoreset="same_step" if transform and transform.same_step else "next_step",
                action_mask_key=action_mask_key,
            )
        envs = self._make_envs()
        if transform is None and sequences is not None:  # recurrent off-policy (DQN, R2D2)
            self.worker = SequenceWorker(envs, self.policy, seeds, **vars(sequences))
            self.transitions = f"sequences-{sequences.length}"
        elif transform is None:
            frame_key = frame_key_of(model_spec, frame_stack)
            self.worker = RolloutWorker(
                envs, self.policy, seeds, n_step=n_step, gamma=gamma, frame_stack=frame_stack,
                action_mask_key=action_mask_key, frame_key=frame_key,
            )  # fmt: skip
            self.transitions = f"nstep-{n_step}"
        elif transform.kind == "chunks":  # trajectory chunks for V-trace (collector.chunks)
            self.worker = ChunkWorker(envs, self.policy, seeds, action_mask_key=action_mask_key)
            self.transitions = transform.kind
        else:
            self.worker = OnPolicyWorker(
                envs, self.policy, seeds, transform, action_mask_key=action_mask_key
            )
            self.transitions = transform.kind
        self.env_errors = 0
        # The step lock guards the network, the worker and the writer's sequence numbers.
        self._step_lock = threading.Lock()
        self._stepper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stepper")
        self._barrier = PauseBarrier()

    # -- weights -----------------------------------------------------------------------------
    @ray.method(concurrency_group="control")
    def policy_version(self) -> tuple[int, int]:
        """``(generation, version)`` of the weights in use; ``(-1, -1)`` before any."""
        return self.weights.label

    @ray.method(concurrency_group="control")
    def set_weights(self, weights) -> bool:
        """Applies published weights if newer than the ones in use; returns whether it did.

        Weights that are not newer by ``(generation, version)`` are ignored, so a collector
        never goes back to older weights.

        Args:
            weights: A ``learner.PublishedWeights`` (generation, version, state dict reference).
        """
        if not self.weights.is_newer(weights):
            return False
        state_dict = ray.get(weights.ref)
        with self._step_lock:
            return self.weights.apply(weights, state_dict)

    # -- rollouts ----------------------------------------------------------------------------
    def rollout(self, frames: int, explore=None, weights=None) -> RolloutReceipt:
        """Collects about ``frames`` transitions, writes them to replay and reports.

        Waits while the collector is paused. The receipt comes back only once the replay
        shard has acknowledged the write.

        Args:
            frames: Frame budget of this rollout: ``frames // num_envs`` vector steps (at least
                one) are taken; auto-reset steps and still-open n-step windows are not written
                (``episodes`` rollouts run one complete episode per env instead).
            explore: Exploration parameters set by the driver (``{"epsilon": 0.1}``; a float
                is an epsilon; ``{"epsilons": [...]}`` gives one epsilon per collector, of
                which this one takes its own, as in Ape-X).
            weights: Optional newer ``PublishedWeights`` to apply before stepping.
        """
        self._barrier.enter()
        try:
            fetched = None  # fetched here, while the stepper may still step the previous rollout
            if weights is not None and self.weights.is_newer(weights):
                fetched = ray.get(weights.ref)
            step = self._step_and_send
            sent = self._stepper.submit(step, frames, explore, weights, fetched).result()
            return sent.receipt(self.collector_id, self.writer.acknowledged(sent))
        finally:
            self._barrier.leave()

    def _step_and_send(self, frames: int, explore, weights, fetched=None) -> SentRollout:
        """Runs on the stepper thread: applies fetched newer weights, steps, sends the write.

        ``fetched`` holds the tensors of ``weights`` (None: nothing newer to apply). Writes leave
        in sequence order because one thread sends them all.
        """
        if isinstance(explore, Mapping) and "epsilons" in explore:
            epsilons = explore["epsilons"]
            explore = {**explore, "epsilon": epsilons[self.collector_id % len(epsilons)]}
        with self._step_lock:
            begun = time.perf_counter()
            if fetched is not None:
                self.weights.apply(weights, fetched)
            start = time.perf_counter()
            steps = max(1, frames // self.worker.num_envs)
            seeds = None
            if self.transitions == "episodes":  # fresh, reproducible episodes every rollout
                seeds = env_seeds(
                    self.seed, self.collector_id, self.worker.num_envs, self.writer.seq + 1, 1
                )
            try:
                batch = self.worker.rollout(steps, explore, self.weights.version, seeds=seeds)
            except Exception as err:
                raise self._rebuild_envs(err) from err
            stepped = time.perf_counter()
            seq, pending = self.writer.send(batch.transitions)
            generation, version = self.weights.label
            work_s = time.perf_counter() - begun
            return SentRollout(
                batch, seq, generation, version, pending, stepped - start, stepped, work_s
            )

    def _rebuild_envs(self, err: Exception) -> EnvError:
        """After an env raised: fresh envs on re-seeded episodes; returns the error to raise.

        Nothing of the failed rollout was written, so the driver counts none of it.
        """
        error = err if isinstance(err, EnvError) else EnvError(self.env_id, -1, repr(err))
        logger.warning("collector-%d: %s; rebuilding its envs", self.collector_id, error)
        with contextlib.suppress(Exception):  # a broken env may not close cleanly
            self.worker.envs.close()
        self.worker.envs = self._make_envs()
        self.env_errors += 1
        self.worker.reset(
            env_seeds(
                self.seed,
                self.collector_id,
                self.worker.num_envs,
                self.writer.seq + 1,
                self.env_errors + 1,
            )
        )
        return error

    # -- pause barrier -------------------------------------------------------------------------
    @ray.method(concurrency_group="control")
    def pause(self, timeout: float | None = None) -> int:
        """Holds new rollouts and returns once none is running and every write is acknowledged.

        Rollout calls that arrive while paused wait (they are not refused) and run after
        :meth:`resume`.

        Args:
            timeout: Seconds to wait for running rollouts; None waits as long as it takes.

        Returns:
            The sequence number the next write will carry.

        Raises:
            TimeoutError: If rollouts are still running after ``timeout`` (still paused).
        """
        if not self._barrier.pause(timeout):
            raise TimeoutError(f"collector {self.collector_id}: rollouts still running")
        return self.writer.seq

    @ray.method(concurrency_group="control")
    def resume(self) -> None:
        """Lets waiting and new rollouts run again."""
        self._barrier.resume()

    # -- state -------------------------------------------------------------------------------
    @ray.method(concurrency_group="control")
    def state_dict(self) -> dict:
        """Counters, RNG states and episode statistics (JSON-able values plus numpy arrays).

        Call it while paused for a consistent cut. See the package docstring for what is not
        captured (mid-episode env state, open n-step windows, partial episodes).
        """
        with self._step_lock:
            return {
                "format": STATE_FORMAT,
                "collector_id": self.collector_id,
                "num_envs": self.worker.num_envs,
                "transitions": self.transitions,
                "seq": self.writer.seq,
                "frames": self.worker.frames,
                "episodes": self.worker.episodes,
                "policy": self.policy.state_dict(),
                "torch_rng": torch.get_rng_state().numpy(),
            }

    @ray.method(concurrency_group="control")
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores counters and RNGs, and restarts every env on a fresh, re-seeded episode.

        The collector takes a new writer id, so restored sequence numbers can never
        be mistaken for retries of writes already stored.

        Raises:
            ValueError: If the state belongs to another collector or another shape of one.
            RuntimeError: If a rollout is running (pause first).
        """
        state = check_state(
            state,
            collector_id=self.collector_id,
            num_envs=self.worker.num_envs,
            transitions=self.transitions,
        )
        with self._barrier.idle(f"collector {self.collector_id}"), self._step_lock:
            self.writer.renew(int(state["seq"]))
            self.worker.frames = int(state["frames"])
            self.worker.episodes = int(state["episodes"])
            self.policy.load_state_dict(state["policy"])
            torch.set_rng_state(torch.tensor(np.asarray(state["torch_rng"]), dtype=torch.uint8))
            num_envs, seq = self.worker.num_envs, self.writer.seq
            self.worker.reset(env_seeds(self.seed, self.collector_id, num_envs, seq + 1))

    @ray.method(concurrency_group="control")
    def set_shards(self, shards: Sequence[str]) -> int:
        """Writes go to these replay shards (actor names) from the next rollout on.

        The home shard becomes ``collector_id % len(shards)``. Call it while paused (the
        driver's resize does), so no write is in flight; returns the number of shards.
        """
        handles = [ray.get_actor(s, namespace="relayrl") for s in shards]
        with self._step_lock:
            self.writer.replay = ReplayClient(handles)
        return len(handles)

    @ray.method(concurrency_group="control")
    def ping(self) -> int:
        """Liveness probe; returns the collector id."""
        return self.collector_id

    @ray.method(concurrency_group="control")
    def node_id(self) -> str:
        """The Ray node this collector runs on."""
        return ray.get_runtime_context().get_node_id()

    @ray.method(concurrency_group="control")
    def pid(self) -> int:
        """This collector's worker process id (what an operator would signal)."""
        return os.getpid()
