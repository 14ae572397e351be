"""SAC's registration: soft actor-critic for continuous actions (``algorithm: sac``).

The loss is ``learner.losses.sac`` (twin Q, Polyak targets, tanh-Gaussian actor, learned
temperature), trained by the ``multi_optimizer`` stepper (one optimizer per named loss method);
collectors sample the tanh-Gaussian actor (``squashed``), optionally with colored noise
(``collector.action_noise``). Its options are ``learner.sac`` (:class:`SACOptions`).

With ``learner.recurrent: lstm | gru`` the network is the recurrent actor and twin critics of
``collector.networks.recurrent_squashed`` and the loss ``learner.losses.sac_sequences``: the
collectors keep one state per env and write sequences (``replay.sequence_length``, required,
with ``sequence_overlap`` and ``burn_in``; ``collector.sequence_worker``) as R2D2's do, each
with the state before its first step; the returns are one-step (``collector.n_step: 1``).
"""

from __future__ import annotations

import dataclasses

from learner.algorithms.spec import (
    ZOO,
    ZOO_BENCH,
    Algorithm,
    GpuCheck,
    LearnEntry,
    Reference,
    SolveTask,
)
from learner.options import check_field


@dataclasses.dataclass(frozen=True)
class SACOptions:
    """SAC's temperature and critics (``learner.sac``).

    Attributes:
        init_alpha: Initial temperature.
        learn_alpha: Learn the temperature toward ``target_entropy``.
        target_entropy: Entropy target; None is ``-action_dim``.
        critic_hidden_sizes: Hidden widths of each Q-network (empty: ``learner.hidden_sizes``);
            feed-forward only (the recurrent critics use ``learner.hidden_sizes``).
    """

    init_alpha: float = 1.0
    learn_alpha: bool = True
    target_entropy: float | None = None
    critic_hidden_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_field(self.init_alpha > 0, "init_alpha", "must be > 0", self.init_alpha)
        check_field(
            all(w >= 1 for w in self.critic_hidden_sizes),
            "critic_hidden_sizes",
            "must be positive widths",
            self.critic_hidden_sizes,
        )


def check_recurrent(config) -> None:
    """Refuses what recurrent SAC cannot run: n-step transitions, critic widths, user networks.

    (Without ``replay.sequence_length`` it is refused by ``services.config.checks``.)

    Raises:
        ValueError: Naming ``collector.n_step``, ``learner.sac.critic_hidden_sizes`` or
            ``learner.network``.
    """
    if config.learner.recurrent == "none":
        return
    if config.learner.network:
        raise ValueError(
            "learner.network: recurrent SAC trains the built-in recurrent actor and critics "
            f"(collector.networks.recurrent_squashed), got {config.learner.network!r}"
        )
    if config.collector.n_step != 1:
        raise ValueError(
            "collector.n_step: recurrent SAC learns one-step soft targets from its sequences; "
            f"must be 1, got {config.collector.n_step}"
        )
    if config.learner.sac.critic_hidden_sizes:
        raise ValueError(
            "learner.sac.critic_hidden_sizes: the recurrent critics use learner.hidden_sizes; "
            f"leave it empty, got {list(config.learner.sac.critic_hidden_sizes)}"
        )


REGISTERED = (
    Algorithm(
        name="sac",
        loop="offpolicy",
        loss="sac",
        loss_factory="learner.losses.sac:sac_loss",
        network="squashed",
        actions="continuous",
        recurrent=True,  # learner.recurrent: collector.networks.recurrent_squashed
        defaults={
            "collector": {"env_id": "Pendulum-v1", "n_step": 1},
            "replay": {"capacity": 200_000},
            "learner": {
                "loss": "sac",
                "hidden_sizes": [256, 256],
                "lr": 1e-3,
                "global_batch_size": 128,
                "target_update_tau": 0.005,
                "grad_clip": "none",
            },
            "controller": {"init_random_frames": 2000, "utd_ratio": 1.0},
        },
        stepper="multi_optimizer",
        options={"sac": SACOptions},
        checks=(check_recurrent,),
        modules=("learner.losses.sac_sequences",),  # the loss with learner.recurrent
        configs=(
            "pendulum_sac.yaml",
            "pendulum_sac_lstm.yaml",
            "mountaincar_continuous_sac.yaml",
            "hopper_sac.yaml",
        ),
        solve=SolveTask("pendulum_sac.yaml", -200.0),
        learn=(
            LearnEntry(
                "mountaincar-sac",
                "mountaincar_continuous_sac.yaml",
                90.0,
                100_000,
                Reference(
                    50_000,
                    94.7,
                    f"{ZOO} hyperparams/sac.yml MountainCarContinuous-v0 (n_timesteps 5e4, gSDE); "
                    f"{ZOO_BENCH}: sac MountainCarContinuous-v0 94.7 +- 1.1 after 50k steps",
                    "the zoo explores with gSDE, relayrl with pink noise (collector.action_noise)",
                ),
                position=30,
            ),
            LearnEntry(
                "hopper-sac",
                "hopper_sac.yaml",
                2000.0,
                1_000_000,
                Reference(
                    1_000_000,
                    2325.5,
                    f"{ZOO} hyperparams/sac.yml Hopper-v4 (n_timesteps 1e6); {ZOO_BENCH}: sac "
                    "Hopper-v3 2325.5 +- 1129.7 after 1M steps",
                    "Hopper-v3 there, v5 here",
                ),
                suites=("full",),
                position=40,
            ),
        ),
        gpu_check=GpuCheck(continuous=True, exact=False),  # samples actions inside its loss
    ),
)
