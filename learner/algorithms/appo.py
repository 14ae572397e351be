"""APPO's registration: PPO's clipped surrogate on V-trace (``algorithm: appo``).

The loss is ``learner.losses.appo`` (IMPACT's old policy, refreshed every
``learner.target_update_interval`` optimizer steps); it runs the asynchronous loop
(``services.driver.loops.asynchronous``) with IMPALA's collectors, networks and
``learner.vtrace`` options (``clip_epsilon`` and ``is_clip`` are APPO's own).
"""

from __future__ import annotations

from learner.algorithms._vtrace import ASYNC_DEFAULTS
from learner.algorithms.spec import (
    ZOO,
    Algorithm,
    GpuCheck,
    LearnEntry,
    Reference,
    SolveTask,
    merged,
    pong_smoke_reference,
)
from learner.options import VTraceOptions


def check_step_minibatches(config) -> None:
    """``learner.vtrace.minibatch_unit: steps`` needs this loss's passes and a feed-forward policy.

    Raises:
        ValueError: Naming ``learner.loss`` (a loss other than the built-in ``appo`` has no
            ``prepare_pass``) or ``learner.recurrent`` (a recurrent policy's steps need their
            chunk's state).
    """
    learner = config.learner
    if learner.vtrace.minibatch_unit != "steps":
        return
    if learner.loss != "appo":
        raise ValueError(
            "learner.loss: with learner.vtrace.minibatch_unit: steps only the built-in appo "
            f"loss prepares passes of steps; got {learner.loss!r}"
        )
    if learner.recurrent != "none":
        raise ValueError(
            "learner.recurrent: with learner.vtrace.minibatch_unit: steps a recurrent policy's "
            f"steps need their chunk's state (use chunks); got {learner.recurrent!r}"
        )


REGISTERED = (
    Algorithm(
        name="appo",
        loop="async",
        loss="appo",
        loss_factory="learner.losses.appo:appo_loss",
        network="actor_critic",
        actions="any",
        defaults=merged(
            ASYNC_DEFAULTS,
            {
                "collector": {"rollout_frames": 256},
                "learner": {
                    "loss": "appo",
                    "hidden_sizes": [64, 64],
                    "lr": 5e-4,
                    "max_grad_norm": 40.0,
                    "global_batch_size": 16,
                    "target_update_interval": 4,
                    "target_update_tau": 1.0,
                    "vtrace": {"num_epochs": 2, "num_minibatches": 2},
                },
            },
        ),
        pixel_network="cnn_actor_critic",
        transform="chunks",
        recurrent=True,
        gpu_check=GpuCheck(continuous=True),
        options={"vtrace": VTraceOptions},
        checks=(check_step_minibatches,),
        configs=(
            "cartpole_appo.yaml",
            "lunarlander_appo.yaml",
            "pong_appo.yaml",
            "pong_appo_gpu.yaml",
        ),
        solve=SolveTask("cartpole_appo.yaml", 475.0),
        learn=(
            LearnEntry(
                "cartpole-appo",
                "cartpole_appo.yaml",
                475.0,
                500_000,
                Reference(
                    2_000_000,
                    450.0,
                    "ray-project/ray rllib/tuned_examples/appo/cartpole_appo.py (stop: return "
                    "450 within 2 M env steps)",
                    "RLlib's release test passes when the return reaches 450 within the budget: "
                    "a bound, not a measured curve",
                ),
                position=14,
            ),
            LearnEntry(
                "lunarlander-appo",
                "lunarlander_appo.yaml",
                200.0,
                1_500_000,
                Reference(
                    1_000_000,
                    242.1,
                    f"{ZOO} benchmark.md: LunarLander-v2 242.1 +- 31.8 after 1M steps (its "
                    "clipped-surrogate lockstep entry)",
                    "the zoo has no asynchronous entry; its lockstep one is what a user compares",
                ),
                position=22,
            ),
            LearnEntry(
                "pong-appo-smoke",
                "pong_appo.yaml",
                -19.0,
                2_000_000,
                pong_smoke_reference("; the lockstep smoke's env, network and batch size"),
                position=51,
            ),
            LearnEntry(
                "pong-appo",
                "pong_appo_gpu.yaml",
                18.0,
                40_000_000,
                Reference(
                    40_000_000,
                    20.0,
                    "ray-project/ray rllib/tuned_examples/appo/pong_appo.py (stop: return 20 "
                    "within 10 M agent steps, frame skip 4)",
                    "RLlib's release test passes when the return is reached within the budget: "
                    "a bound, not a measured curve",
                ),
                suites=("full",),
                position=54,
            ),
        ),
    ),
)
