"""DQN's registration: double, dueling, n-step, prioritized Q-learning (``algorithm: dqn``).

The loss is ``learner.losses.dqn`` (its docstring has the math); collectors act
epsilon-greedily over the Q-network (``q_mlp``, or ``cnn_q`` over stacked frames, whose frames
replay may store once: ``replay.frame_stack``); the off-policy loop paces learner rounds by
the update-to-data ratio. TorchRL's Q-learning losses train it too (``learner.loss:
torchrl:DQNLoss`` and any ``torchrl.objectives`` class taking a ``value_network``).

With ``learner.recurrent: lstm | gru`` it is recurrent DQN: the Q-network gets a recurrent core
(``collector.networks.recurrent.RecurrentQ``), the collectors write sequences with their
stored states (``replay.sequence_length``, as R2D2's), and the loss is the sequence Q-learning
core (``learner.losses.sequence_q``) with DQN's Huber penalty and ``learner.double_dqn``, its
n-step returns computed learner-side over each sequence (``learner.dqn.n_step``, which must
equal ``collector.n_step``) and no value rescaling; options: ``learner.dqn``
(:class:`DQNOptions`). R2D2 (``algorithm: r2d2``) is the same core with R2D2's own defaults, a
squared penalty and value rescaling.
"""

from __future__ import annotations

import dataclasses

from learner.algorithms._connect4 import connect4_entry
from learner.algorithms.spec import (
    ZOO,
    ZOO_BENCH,
    Algorithm,
    GpuCheck,
    LearnEntry,
    Reference,
    SolveTask,
    pong_smoke_reference,
)
from learner.options import check_field


@dataclasses.dataclass(frozen=True)
class DQNOptions:
    """Recurrent DQN's sequence returns and priorities (``learner.dqn``).

    Read with ``learner.recurrent`` only: feed-forward DQN's n-step transitions are built
    collector-side (``collector.n_step``) and its priorities are ``|delta|`` per transition.

    Attributes:
        n_step: Steps of the returns, computed over each sequence (a window reaching the
            sequence's end bootstraps from its last next state); must equal ``collector.n_step``
            with ``learner.recurrent``, so that a config means one n-step either way.
        priority_eta: ``eta`` of the sequence priority ``eta max|delta| + (1 - eta) mean|delta|``
            over the sequence's valid post-burn-in steps (R2D2's, 0.9 as in its paper; 1: the
            largest error only, 0: the mean).
    """

    n_step: int = 3
    priority_eta: float = 0.9

    def __post_init__(self) -> None:
        check_field(self.n_step >= 1, "n_step", "must be >= 1", self.n_step)
        check_field(
            0 <= self.priority_eta <= 1, "priority_eta", "must be in [0, 1]", self.priority_eta
        )


def check_recurrent_n_step(config) -> None:
    """Refuses recurrent DQN whose learner-side n-step differs from ``collector.n_step``.

    Sequence collectors write single steps; the returns are the learner's
    (``learner.dqn.n_step``), so both fields must say the same.

    Raises:
        ValueError: Naming ``learner.dqn.n_step``.
    """
    n_step = config.learner.dqn.n_step
    if config.learner.recurrent != "none" and n_step != config.collector.n_step:
        raise ValueError(
            "learner.dqn.n_step: recurrent DQN computes its n-step returns learner-side over "
            f"each sequence; must equal collector.n_step={config.collector.n_step}, got {n_step}"
        )


REGISTERED = (
    Algorithm(
        name="dqn",
        loop="offpolicy",
        loss="dqn",
        loss_factory="learner.losses.dqn:dqn_loss",
        network="q_mlp",
        actions="discrete",
        pixel_network="cnn_q",
        epsilon_greedy=True,
        recurrent=True,  # recurrent DQN: sequence replay, learner.losses.sequence_q
        options={"dqn": DQNOptions},
        checks=(check_recurrent_n_step,),
        torchrl_losses={"*": "learner.losses.torchrl_loss:torchrl_loss"},
        configs=(
            "cartpole_dqn.yaml",
            "cartpole_dqn_external.yaml",
            "cartpole_dqn_torchrl.yaml",
            "cartpole_dqn_ws2.yaml",
            "multinode_dqn.yaml",
            "lunarlander_dqn.yaml",
            "pong_dqn.yaml",
            "pong_dqn_gpu.yaml",
            "pong_dqn_small.yaml",
            "connect4_dqn_masked.yaml",
            "statelesscartpole_dqn_lstm.yaml",
        ),
        solve=SolveTask("cartpole_dqn.yaml", 475.0),
        learn=(
            LearnEntry(
                "cartpole-dqn",
                "cartpole_dqn.yaml",
                475.0,
                100_000,
                Reference(
                    50_000,
                    500.0,
                    f"{ZOO} hyperparams/dqn.yml CartPole-v1 (n_timesteps 5e4); {ZOO_BENCH}: dqn "
                    "CartPole-v1 500 +- 0 after 50k steps",
                    "the zoo scores the final greedy policy; the bench, the training episodes",
                ),
                position=10,
            ),
            LearnEntry(
                "lunarlander-dqn",
                "lunarlander_dqn.yaml",
                200.0,
                600_000,
                Reference(
                    100_000,
                    280.2,
                    f"{ZOO} hyperparams/dqn.yml LunarLander-v3 (n_timesteps 1e5); the zoo's "
                    "trained agent huggingface.co/araffin/dqn-LunarLander-v2 scores 280.2 +- 13.0",
                    f"greedy evaluation of the final policy; {ZOO_BENCH} lists 154 +- 79 for an "
                    "older run of the same settings",
                ),
                position=20,
            ),
            connect4_entry("dqn", 300_000, position=16),
            LearnEntry(
                "statelesscartpole-dqn-lstm",
                "statelesscartpole_dqn_lstm.yaml",
                475.0,
                500_000,
                Reference(
                    None,
                    500.0,
                    "Hausknecht & Stone 2015 (DRQN) for the method; the bar is issue 39's: "
                    "velocity-masked CartPole-v1 (500 steps at most) to 475 within 500 k frames",
                    "no published figure on this env",
                ),
                suites=("full",),  # the cpu suite runs R2D2 on the same env
                position=13,
            ),
            LearnEntry(
                "pong-dqn-smoke",
                "pong_dqn_small.yaml",
                -19.0,
                1_000_000,
                pong_smoke_reference(),
                suites=("full",),  # one update per agent step: hours per seed on one CPU core
                position=51,
            ),
            LearnEntry(
                "pong-dqn",
                "pong_dqn_gpu.yaml",
                18.0,
                10_000_000,
                Reference(
                    4_400_000,
                    20.0,
                    "ray-project/ray rllib/tuned_examples/dqn/pong-dqn.yaml (~20 within 1.1M "
                    "agent steps, frame skip 4)",
                ),
                suites=("full",),
                position=52,
            ),
        ),
        gpu_check=GpuCheck(learner={"dueling": True}),
        bench={
            "determinism": (
                "replay.sampler=prioritized",
                "learner.update_priorities=true",
                "learner.global_batch_size=64",
                "controller.init_random_frames=1000",
                "controller.utd_ratio=0.125",
            ),
        },
        featured={"help": "cartpole_dqn.yaml", "bench_elastic": "cartpole_dqn.yaml"},
        default=True,
    ),
)
