"""REINFORCE's registration: Monte-Carlo policy gradient (``algorithm: reinforce``).

The loss is ``learner.losses.reinforce`` (optionally with a learned baseline); collectors
build returns-to-go over complete episodes (``transform: episodes``), so a batch is whatever
complete episodes the collectors finished.
"""

from __future__ import annotations

from learner.algorithms.spec import (
    ON_POLICY_DEFAULTS,
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
        name="reinforce",
        loop="onpolicy",
        loss="reinforce",
        loss_factory="learner.losses.reinforce:reinforce_loss",
        network="actor_critic",
        actions="any",
        defaults=merged(
            ON_POLICY_DEFAULTS,
            {
                "learner": {
                    "loss": "reinforce",
                    "hidden_sizes": [64, 64],
                    "lr": 1e-3,
                    "onpolicy": {"num_epochs": 1, "num_minibatches": 1},
                },
            },
        ),
        transform="episodes",
        recurrent=True,
        options={"onpolicy": OnPolicyOptions},
        configs=("cartpole_reinforce.yaml",),
        solve=SolveTask("cartpole_reinforce.yaml", 475.0, default=False),
        learn=(
            LearnEntry(
                "cartpole-reinforce",
                "cartpole_reinforce.yaml",
                475.0,
                500_000,
                Reference(
                    100_000,
                    150.0,
                    "ray-project/ray rllib/tuned_examples/pg/cartpole-pg.yaml (stop: episode "
                    "reward mean 150 within 100k timesteps, CartPole-v0)",
                    "RLlib's vanilla policy gradient is checked at 150, not 475; no zoo or CleanRL "
                    "REINFORCE figure exists",
                ),
                position=13,
            ),
        ),
        gpu_check=GpuCheck(),
    ),
)
