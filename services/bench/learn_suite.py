"""The entries of ``python -m services.bench learn``: a shipped config, its goal, its reference.

Each :class:`Entry` names a config in ``deploy/configs/`` and what the bench asks of it: the
running mean return (over ``episode_window`` training episodes) to reach, the frame budget to
reach it in, and the published figure it is compared with (:class:`Reference`: the frames in
which the reference reached a return at least the threshold, and where that figure is
published). The config's header comment names the same source and the settings taken from it.

The goal and the reference live here, not in the run config: they are the bench's questions
about a config, not part of a run (the same config is a user's starting point with any budget,
and ``RunConfig`` refuses keys no component reads). The bench passes the threshold, the window
and the budget to each run as ``--set`` overrides (``controller.stop_return``,
``controller.return_milestones``, ``controller.episode_window``, ``controller.total_frames``).

Suites: ``cpu`` holds what finishes on a 2-core machine in about 10 minutes per entry and seed;
``full`` holds every entry, for a machine with a GPU (the GPU configs ask for one) and the
``box2d``, ``mujoco``, ``atari`` and ``marl`` extras.

Examples:
    >>> [entry.name for entry in suite("cpu")][:2]
    ['cartpole-dqn', 'cartpole-ppo']
    >>> ENTRIES["lunarlander-ppo"].reference.frames
    1000000
"""

from __future__ import annotations

import dataclasses

SUITES = ("cpu", "full")


@dataclasses.dataclass(frozen=True)
class Reference:
    """A published figure an entry is compared with.

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
class Entry:
    """One config the bench runs, to its threshold or its frame budget.

    Attributes:
        name: The entry's key in the bench's JSON and the name of its plot.
        config: File name in ``deploy/configs/``.
        threshold: Running mean return that counts as reached (the run stops there).
        frame_budget: Frames a run may take at most (``controller.total_frames``).
        reference: The published figure compared with.
        suites: The suites holding the entry (``full`` holds every entry).
        episode_window: Episodes in the running mean.
        overrides: Further ``--set`` overrides of the config (``key=value``).
    """

    name: str
    config: str
    threshold: float
    frame_budget: int
    reference: Reference
    suites: tuple[str, ...] = ("cpu", "full")
    episode_window: int = 20
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.suites) - set(SUITES)
        if unknown or "full" not in self.suites:
            raise ValueError(f"suites: must be among {SUITES} with 'full', got {self.suites}")
        if self.frame_budget < 1 or self.episode_window < 1:
            raise ValueError(f"{self.name}: frame_budget and episode_window must be >= 1")


_ZOO = "DLR-RM/rl-baselines3-zoo"
_ZOO_BENCH = f"{_ZOO} benchmark.md"
_CARTPOLE = "CartPole-v1: running mean 475 over 20 episodes"


def _pong_smoke(more: str = "") -> Reference:
    """A Pong smoke's reference: random play, which the threshold is clearly above."""
    return Reference(
        None,
        -20.7,
        "Mnih et al. 2015 (Nature 518), Extended Data Table 2: random play on Pong -20.7",
        "a smoke: a running mean clearly above random play, not a learned game; uniform random "
        "actions score -20.3 +- 0.9 per episode in relayrl's Pong (64 episodes), so -19 is about "
        "6 standard errors of a 20-episode mean above them" + more,
    )


_ENTRIES = (
    # CartPole-v1: every algorithm family that takes a discrete action space.
    Entry(
        "cartpole-dqn",
        "cartpole_dqn.yaml",
        475.0,
        100_000,
        Reference(
            50_000,
            500.0,
            f"{_ZOO} hyperparams/dqn.yml CartPole-v1 (n_timesteps 5e4); {_ZOO_BENCH}: dqn "
            "CartPole-v1 500 +- 0 after 50k steps",
            "the zoo scores the final greedy policy; the bench, the training episodes",
        ),
    ),
    Entry(
        "cartpole-ppo",
        "cartpole_ppo.yaml",
        475.0,
        100_000,
        Reference(
            100_000,
            500.0,
            f"{_ZOO} hyperparams/ppo.yml CartPole-v1 (n_timesteps 1e5); {_ZOO_BENCH}: ppo "
            "CartPole-v1 500 +- 0 after 100k steps",
        ),
    ),
    Entry(
        "cartpole-a2c",
        "cartpole_a2c.yaml",
        475.0,
        500_000,
        Reference(
            500_000,
            500.0,
            f"{_ZOO} hyperparams/a2c.yml CartPole-v1 (n_timesteps 5e5); {_ZOO_BENCH}: a2c "
            "CartPole-v1 500 +- 0 after 500k steps",
        ),
    ),
    Entry(
        "cartpole-reinforce",
        "cartpole_reinforce.yaml",
        475.0,
        500_000,
        Reference(
            100_000,
            150.0,
            "ray-project/ray rllib/tuned_examples/pg/cartpole-pg.yaml (stop: episode reward "
            "mean 150 within 100k timesteps, CartPole-v0)",
            "RLlib's vanilla policy gradient is checked at 150, not 475; no zoo or CleanRL "
            "REINFORCE figure exists",
        ),
    ),
    # LunarLander-v3 (the box2d extra).
    Entry(
        "lunarlander-dqn",
        "lunarlander_dqn.yaml",
        200.0,
        600_000,
        Reference(
            100_000,
            280.2,
            f"{_ZOO} hyperparams/dqn.yml LunarLander-v3 (n_timesteps 1e5); the zoo's trained "
            "agent huggingface.co/araffin/dqn-LunarLander-v2 scores 280.2 +- 13.0",
            f"greedy evaluation of the final policy; {_ZOO_BENCH} lists 154 +- 79 for an "
            "older run of the same settings",
        ),
    ),
    Entry(
        "lunarlander-ppo",
        "lunarlander_ppo.yaml",
        200.0,
        1_500_000,
        Reference(
            1_000_000,
            242.1,
            f"{_ZOO} hyperparams/ppo.yml LunarLander-v3 (n_timesteps 1e6); {_ZOO_BENCH}: ppo "
            "LunarLander-v2 242.1 +- 31.8 after 1M steps",
            "the zoo scores the final greedy policy; the bench, the training episodes",
        ),
    ),
    # MountainCarContinuous-v0.
    Entry(
        "mountaincar-sac",
        "mountaincar_continuous_sac.yaml",
        90.0,
        100_000,
        Reference(
            50_000,
            94.7,
            f"{_ZOO} hyperparams/sac.yml MountainCarContinuous-v0 (n_timesteps 5e4, gSDE); "
            f"{_ZOO_BENCH}: sac MountainCarContinuous-v0 94.7 +- 1.1 after 50k steps",
            "the zoo explores with gSDE, relayrl with pink noise (collector.action_noise)",
        ),
    ),
    Entry(
        "mountaincar-ppo",
        "mountaincar_continuous_ppo.yaml",
        90.0,
        300_000,
        Reference(
            20_000,
            88.3,
            f"{_ZOO} hyperparams/ppo.yml MountainCarContinuous-v0 (n_timesteps 2e4, gSDE, "
            f"normalized observations); {_ZOO_BENCH}: ppo 88.3 +- 2.6 after 20k steps",
            "below the threshold of 90; the zoo explores with gSDE, relayrl with pink noise",
        ),
        suites=("full",),
    ),
    # MuJoCo (the mujoco extra).
    Entry(
        "hopper-sac",
        "hopper_sac.yaml",
        2000.0,
        1_000_000,
        Reference(
            1_000_000,
            2325.5,
            f"{_ZOO} hyperparams/sac.yml Hopper-v4 (n_timesteps 1e6); {_ZOO_BENCH}: sac "
            "Hopper-v3 2325.5 +- 1129.7 after 1M steps",
            "Hopper-v3 there, v5 here",
        ),
        suites=("full",),
    ),
    Entry(
        "hopper-ppo",
        "hopper_ppo.yaml",
        2000.0,
        2_000_000,
        Reference(
            1_000_000,
            2410.4,
            f"{_ZOO} hyperparams/ppo.yml Hopper-v4 (n_timesteps 1e6, normalized observations "
            f"and rewards); {_ZOO_BENCH}: ppo Hopper-v3 2410.4 +- 10.0 after 1M steps",
            "the zoo normalizes observations and rewards (VecNormalize); relayrl does not "
            "(CleanRL's settings otherwise)",
        ),
        suites=("full",),
    ),
    # Pong: a CPU smoke to a return above random play, and the full runs.
    Entry(
        "pong-ppo-smoke",
        "pong_ppo.yaml",
        -19.0,
        2_000_000,
        _pong_smoke(
            "; chainerrl's PPO with these minibatches was at -15.1 after 200 k agent steps "
            "(800 k frames)"
        ),
    ),
    Entry(
        "pong-dqn-smoke",
        "pong_dqn_small.yaml",
        -19.0,
        1_000_000,
        _pong_smoke(),
        suites=("full",),  # one update per agent step: hours per seed on one CPU core
    ),
    Entry(
        "pong-dqn",
        "pong_dqn_gpu.yaml",
        18.0,
        10_000_000,
        Reference(
            4_400_000,
            20.0,
            "ray-project/ray rllib/tuned_examples/dqn/pong-dqn.yaml (~20 within 1.1M agent "
            "steps, frame skip 4)",
        ),
        suites=("full",),
    ),
    Entry(
        "pong-ppo",
        "pong_ppo_gpu.yaml",
        18.0,
        40_000_000,
        Reference(
            20_000_000,
            20.0,
            "ray-project/ray rllib/tuned_examples/ppo/pong_ppo.py (stop: return 20 within 5M "
            "agent steps, frame skip 4)",
        ),
        suites=("full",),
    ),
    # Spread (the marl extra).
    Entry(
        "spread-qmix",
        "spread_qmix.yaml",
        -60.0,
        200_000,
        Reference(
            60_000,
            -56.2,
            "services.bench marl (docs/benchmarks.md): QMIX -56.2 after 60k frames, random "
            "play -78.3",
            "no published Spread figure on this reward scale (sum of the 3 agents' rewards, "
            "25 steps)",
        ),
        suites=("full",),
        episode_window=100,
    ),
    Entry(
        "spread-vdn",
        "spread_vdn.yaml",
        -60.0,
        200_000,
        Reference(
            60_000,
            -56.1,
            "services.bench marl (docs/benchmarks.md): VDN -56.1 after 60k frames, random "
            "play -78.3",
            "no published Spread figure on this reward scale (sum of the 3 agents' rewards, "
            "25 steps)",
        ),
        suites=("full",),
        episode_window=100,
    ),
)

ENTRIES: dict[str, Entry] = {entry.name: entry for entry in _ENTRIES}


def suite(name: str) -> list[Entry]:
    """The entries of suite ``name`` (``cpu`` or ``full``), in the order they run.

    Raises:
        ValueError: If ``name`` is not a suite.
    """
    if name not in SUITES:
        raise ValueError(f"--suite: must be one of {SUITES}, got {name!r}")
    return [entry for entry in _ENTRIES if name in entry.suites]
