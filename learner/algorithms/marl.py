"""The cooperative multi-agent registrations: IQL, VDN and QMIX (``algorithm: iql | vdn | qmix``).

The three differ only in the mixer (``learner.marl.mixer``, which each fixes): they share the
off-policy loop, the ``marl`` loss (``learner.losses.marl``, mixers in
``learner.losses.mixers``), the ``agents`` network (per-agent epsilon-greedy over one
parameter-shared agent network, ``collector.networks.agents``) and the PettingZoo wrapper
(``collector.envs.multiagent``; its refusals and spaces: ``services.config.multiagent``).
Their defaults train MPE's Spread (``simple_spread_v3`` from ``mpe2``; the ``marl`` extra).
"""

from __future__ import annotations

import dataclasses

from learner.algorithms.spec import Algorithm, LearnEntry, Reference, merged
from learner.options import check_field

MIXERS = ("none", "vdn", "qmix")


@dataclasses.dataclass(frozen=True)
class MultiAgentOptions:
    """The multi-agent Q-learning mixer and agent inputs (``learner.marl``; ``loss: marl``).

    Attributes:
        mixer: ``none`` (independent Q-learners, IQL), ``vdn`` (sum of agent values) or
            ``qmix`` (monotonic hypernetwork mixer on the global state); fixed by the
            ``algorithm`` (iql, vdn, qmix).
        mixing_embed_dim: QMIX mixing layer width.
        hypernet_hidden: Hidden width of QMIX's weight hypernetworks (0: one linear layer).
        prev_action: Agents also see the one-hot of their previous action.
    """

    mixer: str = "qmix"
    mixing_embed_dim: int = 32
    hypernet_hidden: int = 64
    prev_action: bool = False

    def __post_init__(self) -> None:
        check_field(self.mixer in MIXERS, "mixer", f"must be one of {MIXERS}", self.mixer)
        check_field(
            self.mixing_embed_dim >= 1, "mixing_embed_dim", "must be >= 1", self.mixing_embed_dim
        )
        check_field(
            self.hypernet_hidden >= 0, "hypernet_hidden", "must be >= 0", self.hypernet_hidden
        )


SPREAD = "mpe2.simple_spread_v3:parallel_env"

# Spread with three agents and discrete actions; the learning rule follows EPyMARL's and
# TorchRL's QMIX/VDN setups (shared 64-unit agent MLP, Adam 5e-4, hard target updates every 200
# steps), scaled to this project's CPU budgets. Episodes end by truncation after 25 steps and
# targets bootstrap through it, so gamma 0.95 (a horizon of about 20 steps) keeps the values
# near the returns they predict instead of -r / (1 - 0.99).
DEFAULTS = {
    "collector": {
        "env_id": SPREAD,  # its defaults: N=3 agents, max_cycles=25, discrete actions
        "envs_per_collector": 8,
        "rollout_frames": 200,
        "n_step": 1,
        "gamma": 0.95,
        "epsilon_start": 1.0,
        "epsilon_end": 0.05,
        "epsilon_anneal_frames": 50_000,
    },
    "replay": {"capacity": 100_000},
    "learner": {
        "loss": "marl",
        "hidden_sizes": [64, 64],
        "lr": 5e-4,
        "gamma": 0.95,
        "global_batch_size": 256,
        "max_grad_norm": 10.0,
        "target_update_interval": 200,
        "target_update_tau": 1.0,
    },
    "controller": {
        "init_random_frames": 2_000,
        "utd_ratio": 0.125,
        "return_milestones": [],
    },
}


def check_global_state(config) -> None:
    """Refuses QMIX without a global state to condition its mixer on.

    Raises:
        ValueError: Naming ``collector.global_state``.
    """
    if config.collector.global_state == "none":
        raise ValueError(
            "collector.global_state: qmix conditions its mixer on the global state; "
            "use 'auto', 'env' or 'observations', got 'none'"
        )


_SPREAD_NOTE = (
    "no published Spread figure on this reward scale (sum of the 3 agents' rewards, 25 steps)"
)


def _spread_entry(name: str, label: str, score: float, position: int) -> LearnEntry:
    return LearnEntry(
        f"spread-{name}",
        f"spread_{name}.yaml",
        -60.0,
        200_000,
        Reference(
            60_000,
            score,
            f"services.bench marl (docs/benchmarks.md): {label} {score} after 60k frames, "
            "random play -78.3",
            _SPREAD_NOTE,
        ),
        suites=("full",),
        episode_window=100,
        position=position,
    )


def _registration(name: str, mixer: str, learn: tuple[LearnEntry, ...] = (), **extra) -> Algorithm:
    return Algorithm(
        name=name,
        loop="offpolicy",
        loss="marl",
        loss_factory="learner.losses.marl:marl_loss",
        network="agents",
        actions="agents",
        defaults=merged(DEFAULTS, {"learner": {"marl": {"mixer": mixer}}}),
        epsilon_greedy=True,
        multi_agent=True,
        options={"marl": MultiAgentOptions},
        fixed={"learner.marl.mixer": mixer},
        configs=(f"spread_{name}.yaml",),
        learn=learn,
        modules=("learner.losses.mixers",),
        **extra,
    )


REGISTERED = (
    _registration("iql", "none"),
    _registration("vdn", "vdn", (_spread_entry("vdn", "VDN", -56.1, 61),)),
    _registration(
        "qmix",
        "qmix",
        (_spread_entry("qmix", "QMIX", -56.2, 60),),
        checks=(check_global_state,),
    ),
)
