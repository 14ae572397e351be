"""PPO's registration: the clipped surrogate on the lockstep on-policy loop (``algorithm: ppo``).

The loss is ``learner.losses.ppo`` (its docstring has the math); collectors sample a
categorical or Gaussian actor-critic (``actor_critic``, or ``cnn_actor_critic`` over frames)
and build GAE advantages; each iteration trains ``learner.onpolicy.num_epochs`` passes of
``num_minibatches`` on exactly the batch collected with the current version. TorchRL's
``ClipPPOLoss`` trains it too (``learner.loss: torchrl:ClipPPOLoss``).
"""

from __future__ import annotations

from learner.algorithms._connect4 import connect4_entry
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
    pong_smoke_reference,
)
from learner.options import OnPolicyOptions

REGISTERED = (
    Algorithm(
        name="ppo",
        loop="onpolicy",
        loss="ppo",
        loss_factory="learner.losses.ppo:ppo_loss",
        network="actor_critic",
        actions="any",
        defaults=merged(
            ON_POLICY_DEFAULTS,
            {
                "collector": {"rollout_frames": 1024, "gae_lambda": 0.95},
                "learner": {
                    "loss": "ppo",
                    "hidden_sizes": [64, 64],
                    "lr": 2.5e-4,
                    "max_grad_norm": 0.5,
                    "onpolicy": {"num_epochs": 4, "num_minibatches": 4},
                },
            },
        ),
        pixel_network="cnn_actor_critic",
        transform="gae",
        recurrent=True,
        options={"onpolicy": OnPolicyOptions},
        torchrl_losses={"ClipPPOLoss": "learner.losses.torchrl_ppo:torchrl_ppo_loss"},
        configs=(
            "cartpole_ppo.yaml",
            "cartpole_ppo_torchrl.yaml",
            "lunarlander_ppo.yaml",
            "mountaincar_continuous_ppo.yaml",
            "hopper_ppo.yaml",
            "pong_ppo.yaml",
            "pong_ppo_gpu.yaml",
            "connect4_ppo_masked.yaml",
            "minigrid_doorkey_ppo.yaml",
            "statelesscartpole_ppo_lstm.yaml",
            "repeatprevious_ppo_gru.yaml",
        ),
        solve=SolveTask("cartpole_ppo.yaml", 475.0),
        learn=(
            LearnEntry(
                "cartpole-ppo",
                "cartpole_ppo.yaml",
                475.0,
                100_000,
                Reference(
                    100_000,
                    500.0,
                    f"{ZOO} hyperparams/ppo.yml CartPole-v1 (n_timesteps 1e5); {ZOO_BENCH}: ppo "
                    "CartPole-v1 500 +- 0 after 100k steps",
                ),
                position=11,
            ),
            connect4_entry("ppo", 300_000, position=17),
            LearnEntry(
                "lunarlander-ppo",
                "lunarlander_ppo.yaml",
                200.0,
                1_500_000,
                Reference(
                    1_000_000,
                    242.1,
                    f"{ZOO} hyperparams/ppo.yml LunarLander-v3 (n_timesteps 1e6); {ZOO_BENCH}: "
                    "ppo LunarLander-v2 242.1 +- 31.8 after 1M steps",
                    "the zoo scores the final greedy policy; the bench, the training episodes",
                ),
                position=21,
            ),
            LearnEntry(
                "mountaincar-ppo",
                "mountaincar_continuous_ppo.yaml",
                90.0,
                300_000,
                Reference(
                    20_000,
                    88.3,
                    f"{ZOO} hyperparams/ppo.yml MountainCarContinuous-v0 (n_timesteps 2e4, gSDE, "
                    f"normalized observations); {ZOO_BENCH}: ppo 88.3 +- 2.6 after 20k steps",
                    "below the threshold of 90; the zoo explores with gSDE, relayrl with pink "
                    "noise",
                ),
                suites=("full",),
                position=31,
            ),
            LearnEntry(
                "hopper-ppo",
                "hopper_ppo.yaml",
                2000.0,
                2_000_000,
                Reference(
                    1_000_000,
                    2410.4,
                    f"{ZOO} hyperparams/ppo.yml Hopper-v4 (n_timesteps 1e6, normalized "
                    f"observations and rewards); {ZOO_BENCH}: ppo Hopper-v3 2410.4 +- 10.0 after "
                    "1M steps",
                    "the zoo normalizes observations and rewards (VecNormalize); relayrl does not "
                    "(CleanRL's settings otherwise)",
                ),
                suites=("full",),
                position=41,
            ),
            LearnEntry(
                "minigrid-doorkey-ppo",
                "minigrid_doorkey_ppo.yaml",
                0.9,
                300_000,
                Reference(
                    80_000,
                    0.9,
                    "lcswillems/rl-starter-files README (PPO on MiniGrid-DoorKey-5x5-v0, "
                    "--frames 80000, its default hyperparameters); the Farama MiniGrid docs list "
                    "it among the envs PPO solves",
                    "rl-starter-files encodes the 7x7x3 view with a small CNN and reports the "
                    "return it logs; the bench flattens the view into an MLP (the minigrid extra)",
                ),
                suites=("full",),
                position=15,
            ),
            LearnEntry(
                "statelesscartpole-ppo-lstm",
                "statelesscartpole_ppo_lstm.yaml",
                475.0,
                500_000,
                Reference(
                    100_000,
                    500.0,
                    f"{ZOO} hyperparams/ppo_lstm.yml CartPoleNoVel-v1 (sb3-contrib RecurrentPPO, "
                    "n_timesteps 1e5); sb3-contrib's RecurrentPPO docs report CartPoleNoVel-v1 "
                    "solved (500) where PPO without memory is not",
                    "CartPoleNoVel-v1 observes the same two of CartPole's four variables as "
                    "relayrl:StatelessCartPole-v1",
                ),
                position=13,
            ),
            LearnEntry(
                "statelesscartpole-ppo-mlp",
                "statelesscartpole_ppo_lstm.yaml",
                475.0,
                500_000,
                Reference(
                    None,
                    500.0,
                    "the control of statelesscartpole-ppo-lstm: the same task and settings with "
                    "the feed-forward policy (learner.recurrent=none)",
                    "expected not to reach the threshold: position and angle alone do not tell "
                    "which way the pole is falling",
                ),
                overrides=("learner.recurrent=none", "run.name=statelesscartpole-ppo-mlp"),
                position=14,
            ),
            LearnEntry(
                "repeatprevious-ppo-gru",
                "repeatprevious_ppo_gru.yaml",
                0.9,
                2_000_000,
                Reference(
                    15_000_000,
                    1.0,
                    "Morad et al., POPGym: Benchmarking Partially Observable Reinforcement "
                    "Learning, ICLR 2023, appendix B table 3: PPO + GRU on RepeatPreviousEasy, "
                    "MMER 1.000 +- 0.000 over 3 trials of 15 M steps (popgym/baselines/ppo.py)",
                    "the score as transcribed in a third-party results table, not checked "
                    "against the paper here; the paper reports the max mean episodic reward, the "
                    "bench the running mean of training episodes",
                ),
                suites=("full",),
                position=18,
            ),
            LearnEntry(
                "pong-ppo-smoke",
                "pong_ppo.yaml",
                -19.0,
                2_000_000,
                pong_smoke_reference(
                    "; chainerrl's PPO with these minibatches was at -15.1 after 200 k agent "
                    "steps (800 k frames)"
                ),
                position=50,
            ),
            LearnEntry(
                "pong-ppo",
                "pong_ppo_gpu.yaml",
                18.0,
                40_000_000,
                Reference(
                    20_000_000,
                    20.0,
                    "ray-project/ray rllib/tuned_examples/ppo/pong_ppo.py (stop: return 20 within "
                    "5M agent steps, frame skip 4)",
                ),
                suites=("full",),
                position=53,
            ),
        ),
        gpu_check=GpuCheck(),
        bench={"determinism": ("learner.onpolicy.num_minibatches=4",)},
        featured={
            "help_on_policy": "cartpole_ppo.yaml",
            "bench_startup": "cartpole_ppo.yaml",
            "bench_recurrent": "statelesscartpole_ppo_lstm.yaml",
            "bench_tune": "lunarlander_ppo.yaml",
        },
    ),
)
