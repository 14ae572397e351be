"""A2C's registration: advantage actor-critic, one gradient step per batch (``algorithm: a2c``).

The loss is ``learner.losses.a2c``; it runs the lockstep on-policy loop with PPO's networks and
GAE, one epoch of one minibatch per collected batch (``one_step_per_batch``).
"""

from __future__ import annotations

from learner.algorithms.spec import (
    ON_POLICY_DEFAULTS,
    ZOO,
    ZOO_BENCH,
    Algorithm,
    GpuCheck,
    LearnEntry,
    Reference,
    SolveTask,
    merged,
)
from learner.options import OnPolicyOptions

REGISTERED = (
    Algorithm(
        name="a2c",
        loop="onpolicy",
        loss="a2c",
        loss_factory="learner.losses.a2c:a2c_loss",
        network="actor_critic",
        actions="any",
        defaults=merged(
            ON_POLICY_DEFAULTS,
            {
                "collector": {"rollout_frames": 40, "gae_lambda": 1.0},
                "learner": {
                    "loss": "a2c",
                    "hidden_sizes": [64, 64],
                    "lr": 7e-4,
                    "max_grad_norm": 0.5,
                    "onpolicy": {
                        "num_epochs": 1,
                        "num_minibatches": 1,
                        "ent_coef": 0.01,
                        "normalize_advantage": False,
                    },
                },
            },
        ),
        pixel_network="cnn_actor_critic",
        transform="gae",
        recurrent=True,
        one_step_per_batch=True,
        options={"onpolicy": OnPolicyOptions},
        configs=("cartpole_a2c.yaml",),
        solve=SolveTask("cartpole_a2c.yaml", 475.0),
        learn=(
            LearnEntry(
                "cartpole-a2c",
                "cartpole_a2c.yaml",
                475.0,
                500_000,
                Reference(
                    500_000,
                    500.0,
                    f"{ZOO} hyperparams/a2c.yml CartPole-v1 (n_timesteps 5e5); {ZOO_BENCH}: a2c "
                    "CartPole-v1 500 +- 0 after 500k steps",
                ),
                position=12,
            ),
        ),
        gpu_check=GpuCheck(continuous=True),
    ),
)
