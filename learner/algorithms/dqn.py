"""DQN's registration: double, dueling, n-step, prioritized Q-learning (``algorithm: dqn``).

The loss is ``learner.losses.dqn`` (its docstring has the math); collectors act
epsilon-greedily over the Q-network (``q_mlp``, or ``cnn_q`` over stacked frames, whose frames
replay may store once: ``replay.frame_stack``); the off-policy loop paces learner rounds by
the update-to-data ratio. TorchRL's Q-learning losses train it too (``learner.loss:
torchrl:DQNLoss`` and any ``torchrl.objectives`` class taking a ``value_network``).
"""

from __future__ import annotations

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
