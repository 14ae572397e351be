"""R2D2's registration: recurrent replay distributed DQN (``algorithm: r2d2``).

Kapturowski et al., "Recurrent Experience Replay in Distributed Reinforcement Learning", ICLR
2019. The loss is ``learner.losses.r2d2`` (its docstring has the math: n-step double Q-learning
over stored sequences, burn-in, value rescaling), R2D2's settings of the sequence Q-learning
core it shares with recurrent DQN (``learner.losses.sequence_q``; ``algorithm: dqn`` with
``learner.recurrent``, whose differences ``docs/algorithms.md`` tabulates); the network is the
recurrent Q-network (``learner.recurrent``, ``collector.networks.recurrent.RecurrentQ``) over
the MLP or the Atari CNN torso; collectors keep one state per env and write overlapping sequences
(``replay.sequence_length``, ``sequence_overlap``, ``burn_in``; ``collector.sequence_worker``) into
prioritized replay, each with the state before its first step; the learner sends R2D2's mixed
sequence priority back. Ape-X's per-collector epsilons: ``collector.epsilon_schedule: apex``.
Its options are ``learner.r2d2`` (:class:`R2D2Options`).
"""

from __future__ import annotations

import dataclasses

from learner.algorithms.spec import Algorithm, LearnEntry, Reference, SolveTask
from learner.options import check_field


@dataclasses.dataclass(frozen=True)
class R2D2Options:
    """R2D2's returns, priorities and value rescaling (``learner.r2d2``).

    Attributes:
        n_step: Steps of the returns, computed over each sequence (a window reaching the
            sequence's end bootstraps from its last next state).
        priority_eta: ``eta`` of the sequence priority ``eta max|delta| + (1 - eta) mean|delta|``.
        value_rescaling: Learn ``h(Q)`` with ``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x``.
        rescale_epsilon: ``eps`` of ``h``.
    """

    n_step: int = 5
    priority_eta: float = 0.9
    value_rescaling: bool = True
    rescale_epsilon: float = 1e-3

    def __post_init__(self) -> None:
        check_field(self.n_step >= 1, "n_step", "must be >= 1", self.n_step)
        check_field(
            0 <= self.priority_eta <= 1, "priority_eta", "must be in [0, 1]", self.priority_eta
        )
        check_field(
            self.rescale_epsilon > 0, "rescale_epsilon", "must be > 0", self.rescale_epsilon
        )


def check_sequences(config) -> None:
    """Refuses R2D2 without a recurrent network or without sequence replay.

    Raises:
        ValueError: Naming ``learner.recurrent`` or ``replay.sequence_length``.
    """
    if config.learner.recurrent == "none":
        raise ValueError("learner.recurrent: r2d2 trains a recurrent network (lstm or gru)")
    if not config.replay.sequences:
        raise ValueError("replay.sequence_length: r2d2 learns from sequences (>= 2), got 0")


REGISTERED = (
    Algorithm(
        name="r2d2",
        loop="offpolicy",
        loss="r2d2",
        loss_factory="learner.losses.r2d2:r2d2_loss",
        network="q_mlp",
        actions="discrete",
        pixel_network="cnn_q",
        epsilon_greedy=True,
        recurrent=True,
        # The paper's settings (Table 2): sequences of 80 with overlap 40 and burn-in 40,
        # 5-step returns, gamma 0.997, priority exponents 0.9 and 0.6.
        defaults={
            "collector": {"n_step": 1, "gamma": 0.997, "epsilon_schedule": "apex"},
            "replay": {
                "sampler": "prioritized",
                "sequence_length": 80,
                "sequence_overlap": 40,
                "burn_in": 40,
                "alpha": 0.9,
                "beta_start": 0.6,
                "beta_end": 0.6,
            },
            "learner": {
                "loss": "r2d2",
                "recurrent": "lstm",
                "recurrent_hidden_size": 512,
                "gamma": 0.997,
                "update_priorities": True,
            },
        },
        options={"r2d2": R2D2Options},
        fixed={"collector.n_step": 1},  # n-step returns are the learner's (learner.r2d2.n_step)
        checks=(check_sequences,),
        configs=(
            "statelesscartpole_r2d2.yaml",
            "statelesscartpole_r2d2_external.yaml",
            "pong_r2d2_gpu.yaml",
        ),
        solve=SolveTask("statelesscartpole_r2d2.yaml", 475.0, default=False),
        learn=(
            LearnEntry(
                "statelesscartpole-r2d2",
                "statelesscartpole_r2d2.yaml",
                475.0,
                500_000,
                Reference(
                    None,
                    500.0,
                    "Kapturowski et al. 2019 (ICLR) for the method; the bar is issue 39's: "
                    "velocity-masked CartPole-v1 (500 steps at most) to 475 within 500 k frames",
                    "no published figure on this env",
                ),
                position=12,
            ),
        ),
    ),
)
