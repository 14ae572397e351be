"""Configuration of the collectors."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from collector.noise import COLORS

DISCRETE_ENCODINGS = ("one_hot", "embedding")  # collector.networks.encoders
VECTOR_MODES = ("sync", "async")  # collector.vector_mode (collector.envs.vector)

EPSILON_SCHEDULES = ("linear", "apex")
GLOBAL_STATES = ("auto", "env", "observations", "none")

# Replay writes up to this size travel inline in the write call (collector to shard over gRPC)
# instead of through the object store. Ray's default cut is 100 KiB; an 8,192-frame CartPole
# write is about 450 KiB, and taking it through the object store costs the raylet and both
# ends several IPC round trips per write. Larger writes (pixel observations) still go through
# the object store, which is the better path for them.
INLINE_WRITE_BYTES = 1 << 20
INLINE_WRITE_ENV = {"RAY_max_direct_call_object_size": str(INLINE_WRITE_BYTES)}


IMAGE_OPTIONS = ("grayscale", "resize", "frame_stack")  # collector.image_keys
MIN_IMAGE_SIDE = 36  # the smallest side the Nature CNN takes (8x8/4, 4x4/2, 3x3/1)


def image_key_options(key: Any, options: Any) -> tuple[bool, tuple[int, ...], int]:
    """One ``collector.image_keys`` entry checked: ``(grayscale, resize, frame_stack)``.

    Raises:
        ValueError: ``image_keys: <key>: ...`` naming the key and the option.

    Examples:
        >>> image_key_options("camera", {"grayscale": True, "resize": 84})
        (True, (84, 84), 1)
    """
    where = f"image_keys: {key!r}"
    if not isinstance(key, str) or not key:
        raise ValueError(f"image_keys: keys must be non-empty key paths, got {key!r}")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ValueError(f"{where}: must be a mapping of {IMAGE_OPTIONS}, got {options!r}")
    unknown = sorted(set(options) - set(IMAGE_OPTIONS))
    if unknown:
        raise ValueError(f"{where}: unknown option {unknown[0]!r}; accepted: {IMAGE_OPTIONS}")
    grayscale = options.get("grayscale", False)
    if not isinstance(grayscale, bool):
        raise ValueError(f"{where}: grayscale must be true or false, got {grayscale!r}")
    resize = options.get("resize") or ()
    if isinstance(resize, int) and not isinstance(resize, bool):
        resize = (resize, resize)
    if not (
        isinstance(resize, list | tuple)
        and len(resize) in (0, 2)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in resize)
        and all(x >= MIN_IMAGE_SIDE for x in resize)
    ):
        raise ValueError(
            f"{where}: resize must be [height, width] (or one side), each >= {MIN_IMAGE_SIDE} "
            f"pixels (the CNN's smallest input), got {options.get('resize')!r}"
        )
    stack = options.get("frame_stack", 1)
    if not isinstance(stack, int) or isinstance(stack, bool) or stack < 1:
        raise ValueError(f"{where}: frame_stack must be an integer >= 1, got {stack!r}")
    return grayscale, tuple(resize), stack


def inherits_inline_writes() -> bool:
    """Whether workers inherit the inline-write limit from the environment Ray started in.

    True in an embedded cluster started with it set, where collectors then need no runtime env
    of their own: a runtime env makes Ray start a dedicated worker process for each collector;
    without one, a collector can take one of the workers Ray prestarts with the cluster.
    """
    limit = os.environ.get("RAY_max_direct_call_object_size")  # noqa: SIM112 (Ray's spelling)
    return limit == str(INLINE_WRITE_BYTES)


@dataclasses.dataclass(frozen=True)
class CollectorConfig:
    """Collector actors, their environments and exploration.

    Attributes:
        env_id: Gymnasium environment id, or ``package.module:function`` returning one env.
        env_kwargs: Keyword arguments for ``gymnasium.make`` or the factory.
        observation_keys: The keys of a ``Dict``/``Tuple`` observation to keep (top-level or
            dotted paths such as ``pos.0``; empty: all), e.g. ``[image, direction]`` to drop
            MiniGrid's ``mission`` text (``collector.envs.spaces``).
        image_keys: Per-key preprocessing of the image keys of a ``Dict``/``Tuple``
            observation, Atari-style: ``{camera: {grayscale: true, resize: [84, 84],
            frame_stack: 4}}`` makes the key ``[4, 84, 84]`` uint8 for the CNN torso
            (``collector.envs.images``); each option may be left out (no change).
        discrete_encoding: How the multi-input encoder takes ``Discrete``/``MultiDiscrete``
            observation keys: ``one_hot`` or ``embedding`` (``collector.networks.encoders``).
        global_state: Multi-agent envs (IQL, VDN, QMIX): the global state stored with each
            transition: ``env`` (the env's ``state()``), ``observations`` (the agents'
            observations concatenated), ``auto`` (``state()`` if the env has one, else the
            observations) or ``none`` (nothing; QMIX needs a state).
        num_collectors: Collector actors (0: experience comes only from external actors over
            gRPC, which needs ``grpc.port``), or ``auto``: as many as the cluster's CPUs offer
            the run (its CPUs less its replay shards' and learner ranks', per
            ``num_cpus``), between ``min_collectors`` and ``max_collectors``, followed live
            as nodes join or leave (``services.driver.autoscale``).
        min_collectors: Fewest collectors of an ``auto`` fleet.
        max_collectors: Most collectors of an ``auto`` fleet (0: no limit but the CPUs).
        envs_per_collector: Sub-environments per collector (one vector env).
        vector_mode: ``sync`` (in-process) or ``async`` (subprocess per env).
        rollout_frames: Frames asked of one rollout call; a multiple of ``envs_per_collector``.
            Larger rollouts amortize per-call costs (``python -m collector.bench``; figures in
            ``docs/benchmarks.md``); smaller ones give fresher weights and finer pacing.
        max_inflight: Rollout calls kept in flight per collector.
        aggregate_min_collectors: From this many collectors on, rollouts and their receipts
            travel through one aggregating actor per node (``collector.manage.hub``), batched both
            ways, instead of one driver call per rollout (0: never). A driver call costs the
            driver far more than counting a receipt, so large fleets need it; small ones save
            the extra hop and process.
        frame_skip: Emulator frames per agent step, for frame counting only (set it to the
            env's own frame skip, e.g. 4 for ALE; relayrl does not repeat actions).
        n_step: Steps per transition window, built collector-side (1: one-step transitions).
        gamma: Discount of the n-step returns and of on-policy advantages; match the
            learner's ``gamma``.
        gae_lambda: GAE's lambda for on-policy collectors (PPO, A2C; 1.0 gives n-step returns
            bootstrapped at the rollout's end).
        num_cpus: Logical Ray CPUs per collector.
        nice: Nice levels each collector process adds to its own at start (0-19; Linux caps
            the result at 19), so that learner ranks on the same cores get the CPU first:
            Sample Factory runs its rollout workers 10 levels below its learner. Ray starts
            workers at niceness 15, so 4 or more puts collectors at 19 below learners at 15.
            It matters where collectors and learners compute at once (the asynchronous loop,
            off-policy); 0: the priority Ray gives (``collector.niceness``).
        max_restarts: Restarts Ray grants a dead collector.
        crash_loop_deaths: Deaths of one collector within ``crash_loop_window_s`` that stop
            the run with an error naming it, instead of restarting it again.
        crash_loop_window_s: Window of the crash-loop rule, in seconds.
        rollout_timeout_s: A rollout running longer is treated as a stuck collector: the actor
            is killed, Ray restarts it, and the rollout is not counted.
        max_env_errors: Env exceptions (each rebuilds the collector's envs, the rollout not
            counted) the run absorbs before it stops with an error naming the last one.
        epsilon_start: Exploration rate at frame 0 (annealed by the driver).
        epsilon_end: Exploration rate after ``epsilon_anneal_frames``.
        epsilon_anneal_frames: Frames over which epsilon decays linearly.
        epsilon_schedule: ``linear`` (every collector uses the annealed epsilon above) or
            ``apex`` (Horgan et al., 2018: collector ``i`` of ``N`` keeps the fixed
            ``apex_epsilon ** (1 + apex_alpha * i / (N - 1))`` after ``init_random_frames``).
        apex_epsilon: Base of the Ape-X epsilons.
        apex_alpha: Exponent spread of the Ape-X epsilons.
        action_noise: The color of a Gaussian policy's sampling noise (SAC, and PPO, A2C,
            REINFORCE on continuous actions): ``white`` (independent per step), ``pink`` or
            ``red`` (temporally correlated, Eberhard et al., 2023; ``collector.noise``), one
            sequence per env as long as an episode. Pink explores MountainCarContinuous, where
            white noise never reaches the goal.
        action_mask_key: Where the env reports which actions are allowed: a ``Dict``
            observation's key (PettingZoo's ``action_mask``; taken out of the observation, a
            single remaining key unwrapped) or an ``info`` key; empty: no masks. Forbidden
            actions are never taken (``collector.envs.masks``). For IQL, VDN and QMIX the key
            of each agent's observation or info: one mask per agent
            (``collector.envs.multiagent``).
    """

    # Environments
    env_id: str = "CartPole-v1"
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    observation_keys: tuple[str, ...] = ()
    image_keys: dict[str, Any] = dataclasses.field(default_factory=dict)
    discrete_encoding: str = "one_hot"
    global_state: str = "auto"
    num_collectors: int | str = 2
    min_collectors: int = 1
    max_collectors: int = 0
    envs_per_collector: int = 8
    vector_mode: str = "sync"
    # Rollouts
    rollout_frames: int = 256
    max_inflight: int = 2
    aggregate_min_collectors: int = 16
    frame_skip: int = 1
    n_step: int = 3
    gamma: float = 0.99
    gae_lambda: float = 0.95
    # Actors
    num_cpus: float = 0.5
    nice: int = 0
    max_restarts: int = 3
    crash_loop_deaths: int = 3
    crash_loop_window_s: float = 300.0
    rollout_timeout_s: float = 300.0
    max_env_errors: int = 10
    # Exploration
    epsilon_start: float = 1.0
    epsilon_end: float = 0.01
    epsilon_anneal_frames: int = 10_000
    epsilon_schedule: str = "linear"
    apex_epsilon: float = 0.4
    apex_alpha: float = 7.0
    action_noise: str = "white"
    # Action masks
    action_mask_key: str = ""

    def __post_init__(self) -> None:
        checks = [
            (
                bool(self.env_id) and self.env_id.strip() == self.env_id,
                "env_id",
                "must be a gymnasium id or module:function",
                self.env_id,
            ),
            (
                self.global_state in GLOBAL_STATES,
                "global_state",
                f"must be one of {GLOBAL_STATES}",
                self.global_state,
            ),
            (
                self.num_collectors == "auto"
                or (isinstance(self.num_collectors, int) and self.num_collectors >= 0),
                "num_collectors",
                "must be an integer >= 0 (0: external actors over gRPC only) or auto",
                self.num_collectors,
            ),
            (self.min_collectors >= 1, "min_collectors", "must be >= 1", self.min_collectors),
            (
                self.max_collectors == 0 or self.max_collectors >= self.min_collectors,
                "max_collectors",
                f"must be 0 (no limit) or >= min_collectors={self.min_collectors}",
                self.max_collectors,
            ),
            (
                self.envs_per_collector >= 1,
                "envs_per_collector",
                "must be >= 1",
                self.envs_per_collector,
            ),
            (
                self.vector_mode in VECTOR_MODES,
                "vector_mode",
                f"must be one of {VECTOR_MODES}",
                self.vector_mode,
            ),
            (
                self.rollout_frames >= self.envs_per_collector
                and self.rollout_frames % self.envs_per_collector == 0,
                "rollout_frames",
                f"must be a positive multiple of envs_per_collector={self.envs_per_collector}",
                self.rollout_frames,
            ),
            (self.max_inflight >= 1, "max_inflight", "must be >= 1", self.max_inflight),
            (
                self.aggregate_min_collectors >= 0,
                "aggregate_min_collectors",
                "must be >= 0 (0: never aggregate)",
                self.aggregate_min_collectors,
            ),
            (self.frame_skip >= 1, "frame_skip", "must be >= 1", self.frame_skip),
            (self.n_step >= 1, "n_step", "must be >= 1", self.n_step),
            (0 <= self.gamma <= 1, "gamma", "must be in [0, 1]", self.gamma),
            (0 <= self.gae_lambda <= 1, "gae_lambda", "must be in [0, 1]", self.gae_lambda),
            (self.num_cpus >= 0, "num_cpus", "must be >= 0", self.num_cpus),
            (
                isinstance(self.nice, int) and 0 <= self.nice <= 19,
                "nice",
                "must be an integer in [0, 19] (raising priority needs privileges)",
                self.nice,
            ),
            (self.max_restarts >= 0, "max_restarts", "must be >= 0", self.max_restarts),
            (
                self.crash_loop_deaths >= 1,
                "crash_loop_deaths",
                "must be >= 1",
                self.crash_loop_deaths,
            ),
            (
                self.crash_loop_window_s > 0,
                "crash_loop_window_s",
                "must be > 0",
                self.crash_loop_window_s,
            ),
            (
                self.rollout_timeout_s > 0,
                "rollout_timeout_s",
                "must be > 0",
                self.rollout_timeout_s,
            ),
            (
                self.discrete_encoding in DISCRETE_ENCODINGS,
                "discrete_encoding",
                f"must be one of {DISCRETE_ENCODINGS}",
                self.discrete_encoding,
            ),
            (
                all(isinstance(key, str) and key for key in self.observation_keys),
                "observation_keys",
                "must be non-empty key names",
                self.observation_keys,
            ),
            (self.max_env_errors >= 0, "max_env_errors", "must be >= 0", self.max_env_errors),
            (
                0 <= self.epsilon_start <= 1,
                "epsilon_start",
                "must be in [0, 1]",
                self.epsilon_start,
            ),
            (0 <= self.epsilon_end <= 1, "epsilon_end", "must be in [0, 1]", self.epsilon_end),
            (
                self.epsilon_anneal_frames >= 0,
                "epsilon_anneal_frames",
                "must be >= 0",
                self.epsilon_anneal_frames,
            ),
            (
                self.epsilon_schedule in EPSILON_SCHEDULES,
                "epsilon_schedule",
                f"must be one of {EPSILON_SCHEDULES}",
                self.epsilon_schedule,
            ),
            (0 < self.apex_epsilon <= 1, "apex_epsilon", "must be in (0, 1]", self.apex_epsilon),
            (self.apex_alpha >= 0, "apex_alpha", "must be >= 0", self.apex_alpha),
            (
                self.action_noise in COLORS,
                "action_noise",
                f"must be one of {tuple(COLORS)}",
                self.action_noise,
            ),
            (
                self.action_mask_key.strip() == self.action_mask_key,
                "action_mask_key",
                "must be an observation or info key without surrounding spaces",
                self.action_mask_key,
            ),
        ]
        for ok, field, rule, value in checks:
            if not ok:
                raise ValueError(f"{field}: {rule}, got {value!r}")
        for key, options in self.image_keys.items():  # refused naming the key and option
            image_key_options(key, options)

    @property
    def auto(self) -> bool:
        """Whether the fleet follows the cluster (``num_collectors: auto``)."""
        return self.num_collectors == "auto"

    @property
    def fleet_size(self) -> int:
        """The number of collectors (``min_collectors`` for an ``auto`` fleet not sized yet)."""
        return self.min_collectors if self.auto else int(self.num_collectors)

    @property
    def aggregate(self) -> bool:
        """Whether rollouts travel through per-node hubs (``aggregate_min_collectors``)."""
        return not self.auto and 0 < self.aggregate_min_collectors <= self.fleet_size

    def apex_epsilons(self) -> tuple[float, ...]:
        """Ape-X's per-collector epsilons ``eps ** (1 + alpha * i / (N - 1))``.

        Examples:
            >>> eps = CollectorConfig(num_collectors=3).apex_epsilons()
            >>> [round(e, 5) for e in eps]
            [0.4, 0.01619, 0.00066]
        """
        count = max(self.fleet_size, 1)
        spread = [i / (count - 1) if count > 1 else 0.0 for i in range(count)]
        return tuple(self.apex_epsilon ** (1 + self.apex_alpha * s) for s in spread)

    def epsilon(self, frames: int) -> float:
        """Linear epsilon schedule over collected frames.

        Examples:
            >>> config = CollectorConfig(epsilon_end=0.1, epsilon_anneal_frames=100)
            >>> config.epsilon(50)
            0.55
        """
        if self.epsilon_anneal_frames == 0 or frames >= self.epsilon_anneal_frames:
            return self.epsilon_end
        fraction = max(frames, 0) / self.epsilon_anneal_frames
        return self.epsilon_start + fraction * (self.epsilon_end - self.epsilon_start)


@dataclasses.dataclass(frozen=True)
class OnPolicyTransform:
    """How an on-policy rollout turns rewards into learning targets.

    Attributes:
        kind: ``gae`` (fixed-length rollouts, GAE), ``episodes`` (complete episodes,
            Monte-Carlo returns) or ``chunks`` (one trajectory chunk per env, no targets: the
            learner computes V-trace; ``collector.chunks``).
        gamma: Discount factor.
        gae_lambda: GAE's lambda (``gae``; 1.0 gives A2C's n-step returns).
        baseline: ``episodes`` only: bootstrap truncations from the critic and subtract
            ``V(s)`` from the returns.
        sequence_length: A recurrent policy's rollouts are stored as sequences of this many
            steps of one env (``collector.sequences``; ``learner.onpolicy.bptt_length``);
            0: the rollout's whole length per env.
    """

    kind: str = "gae"
    gamma: float = 0.99
    gae_lambda: float = 0.95
    baseline: bool = True
    sequence_length: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("gae", "episodes", "chunks"):
            raise ValueError(f"kind: must be 'gae', 'episodes' or 'chunks', got {self.kind!r}")
        if self.sequence_length < 0:
            raise ValueError(f"sequence_length: must be >= 0, got {self.sequence_length}")

    @property
    def same_step(self) -> bool:
        """Whether its envs auto-reset in ``SAME_STEP`` mode (``chunks`` keep ``NEXT_STEP``)."""
        return self.kind != "chunks"
