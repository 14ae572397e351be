"""The registration type: everything one algorithm is, declared once (no torch, no Ray).

An :class:`Algorithm` names the algorithm's loop, loss, stepper, options section, network,
exploration, the config checks it adds, its shipped configs and its bench tasks. Every other
part of relayrl reads these fields (the loss registry, ``stepper: auto``, the config checks,
the GPU checks, ``services.bench solve`` and ``learn``), so no module outside an algorithm's
registration and its loss branches on its name. ``docs/development.md`` has the recipe for
adding one.

Examples:
    >>> entry = LearnEntry("cartpole-x", "cartpole_x.yaml", 475.0, 100_000,
    ...                    Reference(50_000, 500.0, "a paper, table 1"))
    >>> entry.suites
    ('cpu', 'full')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # registrations load with the config: no gymnasium or numpy until used
    import gymnasium as gym

    from collector.config import OnPolicyTransform

SUITES = ("cpu", "full")
ACTIONS = ("discrete", "continuous", "any", "agents")


@dataclasses.dataclass(frozen=True)
class Reference:
    """A published figure a bench entry is compared with.

    Attributes:
        frames: Env frames (agent steps x frame skip) in which the reference reached ``score``;
            None when the reference is a return only (e.g. random play).
        score: The return the reference reports at ``frames``.
        source: Where it is published (repository and file, or paper and table).
        note: What differs from the bench's measure (evaluation protocol, env version).
    """

    frames: int | None
    score: float
    source: str
    note: str = ""


@dataclasses.dataclass(frozen=True)
class LearnEntry:
    """One shipped config that ``services.bench learn`` runs, to its threshold or its budget.

    Attributes:
        name: The entry's key in the bench's JSON and the name of its plot.
        config: File name in ``deploy/configs/``.
        threshold: Running mean return that counts as reached (the run stops there).
        frame_budget: Frames a run may take at most (``controller.total_frames``).
        reference: The published figure compared with.
        suites: The suites holding the entry (``full`` holds every entry).
        episode_window: Episodes in the running mean.
        overrides: Further ``--set`` overrides of the config (``key=value``).
        position: Where the entry runs in a suite (lower first; cheap environments first).
    """

    name: str
    config: str
    threshold: float
    frame_budget: int
    reference: Reference
    suites: tuple[str, ...] = ("cpu", "full")
    episode_window: int = 20
    overrides: tuple[str, ...] = ()
    position: int = 0

    def __post_init__(self) -> None:
        unknown = set(self.suites) - set(SUITES)
        if unknown or "full" not in self.suites:
            raise ValueError(f"suites: must be among {SUITES} with 'full', got {self.suites}")
        if self.frame_budget < 1 or self.episode_window < 1:
            raise ValueError(f"{self.name}: frame_budget and episode_window must be >= 1")


@dataclasses.dataclass(frozen=True)
class SolveTask:
    """What ``services.bench solve`` asks of the algorithm: a shipped config to a return.

    Attributes:
        config: File name in ``deploy/configs/``.
        threshold: Running mean return over 20 episodes that counts as solved.
        default: Whether ``--algos`` runs it when not given.
    """

    config: str
    threshold: float
    default: bool = True


@dataclasses.dataclass(frozen=True)
class GpuCheck:
    """How ``python -m learner.gpu.algorithms`` checks the loss on a CUDA device.

    The network is the registration's own (``network``), built for 8-wide observations and
    the action space below, with 256-unit layers.

    Attributes:
        continuous: Two continuous actions in [-1, 1] (else four discrete ones).
        learner: ``LearnerConfig`` fields beside ``loss`` (e.g. ``{"dueling": True}``).
        exact: The first step's losses must match the CPU's (False where the loss samples on
            the device, whose random stream differs).
    """

    continuous: bool = False
    learner: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    exact: bool = True


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm's registration.

    Attributes:
        name: The ``algorithm`` value.
        loop: A key of the driver's loop registry (``services.driver.loops.LOOPS``):
            ``offpolicy`` (asynchronous collection into replay, learner rounds paced by the
            update-to-data ratio), ``onpolicy`` (lockstep iterations over FIFO tables) or
            ``async`` (collectors never wait; FIFO tables as a bounded learner queue).
        loss: The ``learner.loss`` key it trains with (a key of ``learner.losses.LOSSES``;
            algorithms may share one, e.g. the multi-agent mixers).
        loss_factory: ``module:factory`` path of that loss, called as
            ``factory(policy_network, learner_config)``.
        network: The network over flat observations (a key of
            ``collector.networks.builders.NETWORKS``).
        actions: Action spaces it accepts: ``discrete``, ``continuous``, ``any`` or ``agents``
            (the multi-agent wrapper's).
        defaults: Config values (nested like the YAML) used where the config sets none.
        pixel_network: The network over stacked uint8 frames ``[S, H, W]`` (a key of
            ``NETWORKS``, discrete actions only); None: flat observations only. Off-policy
            ones may store frames once in replay (``replay.frame_stack``).
        transform: On-policy collectors' targets: ``gae``, ``episodes`` or ``chunks`` (the
            asynchronous loop's trajectory chunks, no targets) (None: off-policy).
        epsilon_greedy: Collectors explore with the driver's annealed epsilon (Q-learning);
            otherwise the policy's own sampling is the exploration (and
            ``collector.action_noise`` may color a Gaussian policy's noise).
        multi_agent: Runs on PettingZoo parallel envs: agent fields carry an agent dimension,
            and the env's spaces are the multi-agent wrapper's.
        recurrent: Trains recurrent networks (``learner.recurrent``: its loss runs sequences
            with their stored states, ``collector.networks.recurrent``); otherwise a config
            setting ``learner.recurrent`` is refused.
        one_step_per_batch: Takes exactly one gradient step per collected batch, so
            ``learner.onpolicy.num_epochs`` and ``num_minibatches`` must be 1.
        stepper: The stepper ``learner.stepper: auto`` picks for its loss (a key of
            ``learner.plugins.STEPPERS``); None: ``default``, or ``mixed_precision`` for
            another precision or gradient accumulation.
        options: Config sections under ``learner`` it adds: section name to a frozen dataclass
            of options (``learner.<name>.<field>`` in YAML); several algorithms may share one.
        fixed: Dotted config fields whose value the algorithm fixes (a config that sets another
            value is refused, naming the field).
        checks: Refusals it adds, each called as ``check(run_config)`` before any actor starts
            and raising ``ValueError`` whose message names the field.
        torchrl_losses: ``torchrl.objectives`` classes that train it (``learner.loss:
            torchrl:<Class>``): class name to the ``module:factory`` that builds it; the key
            ``*`` stands for any class taking a ``value_network``.
        configs: Its shipped configs (file names in ``deploy/configs/``).
        solve: Its ``services.bench solve`` task (None: none).
        learn: Its ``services.bench learn`` entries.
        gpu_check: How ``learner.gpu.algorithms`` checks it (None: not checked).
        bench: The settings other benches run it with: bench name to ``--set`` overrides
            (``determinism``: ``services.bench determinism`` runs every algorithm that has it).
        featured: Shipped configs that commands and benches feature, by role: ``help`` and
            ``help_on_policy`` (the examples help texts show), ``bench_elastic``,
            ``bench_startup``, ``bench_tune`` and ``bench_recurrent`` (the configs those benches
            run); each role belongs to one registration.
        modules: Modules that belong to it beyond its registration and its loss module (e.g. a
            mixer); they may name it.
        default: The algorithm a config without ``algorithm`` runs (exactly one has it).
    """

    name: str
    loop: str
    loss: str
    loss_factory: str
    network: str
    actions: str
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    pixel_network: str | None = None
    transform: str | None = None
    epsilon_greedy: bool = False
    multi_agent: bool = False
    recurrent: bool = False
    one_step_per_batch: bool = False
    stepper: str | None = None
    options: Mapping[str, type] = dataclasses.field(default_factory=dict)
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    checks: tuple[Callable[[Any], None], ...] = ()
    torchrl_losses: Mapping[str, str] = dataclasses.field(default_factory=dict)
    configs: tuple[str, ...] = ()
    solve: SolveTask | None = None
    learn: tuple[LearnEntry, ...] = ()
    gpu_check: GpuCheck | None = None
    bench: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    featured: Mapping[str, str] = dataclasses.field(default_factory=dict)
    modules: tuple[str, ...] = ()
    default: bool = False

    def __post_init__(self) -> None:
        if self.actions not in ACTIONS:
            raise ValueError(f"{self.name}: actions must be one of {ACTIONS}, got {self.actions!r}")

    @property
    def on_policy(self) -> bool:
        """Whether it learns from its own recent samples (FIFO tables): lockstep or asynchronous."""
        return self.loop in ("onpolicy", "async")

    @property
    def lockstep(self) -> bool:
        """Whether it runs the lockstep on-policy loop (every collector in every iteration)."""
        return self.loop == "onpolicy"

    @property
    def loss_module(self) -> str:
        """The module of its loss factory."""
        return self.loss_factory.partition(":")[0]

    def network_for(self, obs_space: gym.Space) -> str:
        """The ``NETWORKS`` key of its network for observations in ``obs_space``."""
        from collector.networks.builders import is_pixels, network_for_space

        if self.pixel_network is not None and is_pixels(obs_space):
            return self.pixel_network
        return network_for_space(self.network, obs_space)  # Dict/Tuple, Discrete, ...

    def collector_transform(self, config) -> OnPolicyTransform | None:
        """What on-policy collectors build (None for off-policy n-step transitions)."""
        if self.transform is None:
            return None
        from collector.config import OnPolicyTransform

        return OnPolicyTransform(
            kind=self.transform,
            gamma=config.collector.gamma,
            gae_lambda=config.collector.gae_lambda,
            baseline=config.learner.onpolicy.baseline,
            sequence_length=self.sequence_length(config),
        )

    def sequence_length(self, config) -> int:
        """Steps per stored item of a lockstep rollout: 1, or a recurrent policy's sequence.

        With ``learner.recurrent`` the lockstep collectors store sequences
        (``collector.sequences``) of ``learner.onpolicy.bptt_length`` steps, or of the rollout's
        whole length per env (``collector.rollout_frames // envs_per_collector``).
        """
        if config.learner.recurrent == "none" or not self.lockstep:
            return 0
        steps = max(1, config.collector.rollout_frames // config.collector.envs_per_collector)
        return config.learner.onpolicy.bptt_length or steps

    def exploration(self, config, frames: int) -> dict[str, Any]:
        """Exploration parameters handed to collectors after ``frames`` collected frames.

        Uniform random actions during ``init_random_frames``; then epsilon-greedy's annealed
        epsilon for Q-learning, and the policy's own sampling for stochastic actors.
        """
        if frames < config.controller.init_random_frames:
            return {"random": True, "epsilon": 1.0} if self.epsilon_greedy else {"random": True}
        if self.epsilon_greedy and config.collector.epsilon_schedule == "apex":
            epsilons = config.collector.apex_epsilons()  # each collector takes its own
            return {"epsilon": sum(epsilons) / len(epsilons), "epsilons": epsilons}
        if self.epsilon_greedy:
            return {"epsilon": config.collector.epsilon(frames)}
        return {}


def merged(base: Mapping, extra: Mapping) -> dict:
    """``base`` updated by ``extra``, nested mappings merged key by key (neither is changed).

    Examples:
        >>> merged({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}, "b": 4})
        {'a': {'x': 1, 'y': 3}, 'b': 4}
    """
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in base.items()}
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


# What every lockstep on-policy algorithm sets unless it says otherwise.
ON_POLICY_DEFAULTS: Mapping[str, Any] = {
    "collector": {"n_step": 1},
    "replay": {"sampler": "fifo", "capacity": 100_000, "num_shards": 1},
    "controller": {"init_random_frames": 0},
}


# Sources several registrations cite.
ZOO = "DLR-RM/rl-baselines3-zoo"
ZOO_BENCH = f"{ZOO} benchmark.md"


def pong_smoke_reference(more: str = "") -> Reference:
    """A Pong smoke's reference: random play, which the threshold (-19) is clearly above."""
    return Reference(
        None,
        -20.7,
        "Mnih et al. 2015 (Nature 518), Extended Data Table 2: random play on Pong -20.7",
        "a smoke: a running mean clearly above random play, not a learned game; uniform random "
        "actions score -20.3 +- 0.9 per episode in relayrl's Pong (64 episodes), so -19 is about "
        "6 standard errors of a 20-episode mean above them" + more,
    )
