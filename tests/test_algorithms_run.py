"""End-to-end runs of every algorithm's config on the shared local Ray (CI-sized budgets)."""

import json
import signal

import numpy as np
import pytest

from services.checkpoints.store import latest_valid
from services.config import load_config
from services.driver.controller import Controller
from services.evaluation.evaluator import EvaluationRunner
from services.evaluation.playback import evaluate_policy
from services.policy import load_policy
from tests.cli_run import CliRun
from tests.conftest import ROOT, run_cli

CONFIGS = ROOT / "deploy" / "configs"


# A final greedy evaluation and a checkpoint of the final version, for load_policy to replay.
EVALUATED = ["checkpoint.at_end=true", "evaluation.interval_frames=1000000000"]


def run_config(name, tmp_path, *overrides):
    config = load_config(
        CONFIGS / name,
        [
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path}",
            "checkpoint.at_end=false",
            "controller.log_interval_s=1",
            "evaluation.episodes=4",
            *overrides,
        ],
    )
    controller = Controller(config)
    if config.evaluation.enabled:
        EvaluationRunner(config, controller).attach()  # as services.run.launch does
    rollouts, rounds = [], []
    # In lockstep every rollout must be collected with the learner's current version.
    controller.register(
        "rollout",
        lambda c, r: rollouts.append((r.policy_version, c.counters.model_version)),
    )
    controller.register("round", lambda c, r: rounds.append(r))
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    return summary, rollouts, rounds


def assert_load_policy_replays_the_final_evaluation(checkpoints, summary):
    """The run's newest checkpoint, loaded without Ray, plays the same greedy episodes."""
    policy = load_policy(checkpoints)
    assert policy.version == summary["eval_version"] == summary["published_version"]
    replay = evaluate_policy(policy)  # the run's seed, envs and episode count
    assert replay["episodes"] == 4
    assert round(replay["return_mean"], 3) == summary["eval_return_mean"]
    return policy, replay


def test_ppo_lockstep_trains_on_the_current_version_only(ray_cluster, tmp_path):
    summary, rollouts, rounds = run_config(
        "cartpole_ppo.yaml",
        tmp_path,
        "controller.total_frames=30720",
        "controller.stop_return=null",
        *EVALUATED,
    )
    assert summary["frames"] == 30720 == summary["transitions"]  # 60 iterations of 512
    assert summary["iteration"] == len(rounds) == 60
    assert summary["optim_steps"] == summary["model_version"] == 60 * 20 * 2
    assert all(policy == learner for policy, learner in rollouts)
    assert [policy for policy, _ in rollouts[::2]] == [40 * i for i in range(60)]
    assert all(r.metrics["policy_lag_max"] == 0 for r in rounds)  # from stored versions
    assert {"approx_kl", "clip_fraction", "entropy", "lr"} <= set(rounds[-1].metrics)
    assert rounds[-1].metrics["lr"] < rounds[0].metrics["lr"]  # the linear schedule
    assert summary["episode_return_mean"] > 150  # random play: about 22
    policy, replay = assert_load_policy_replays_the_final_evaluation(tmp_path, summary)
    assert policy.family == "actor_critic" and replay["return_mean"] > 100  # greedy


def test_ppo_with_two_ranks_splits_every_minibatch(ray_cluster, tmp_path):
    summary, rollouts, rounds = run_config(
        "cartpole_ppo.yaml",
        tmp_path,
        "controller.total_frames=5120",
        "controller.stop_return=null",
        "learner.world_size=2",
    )
    assert summary["iteration"] == len(rounds) == 10
    assert summary["model_version"] == 10 * 40
    # Each rank takes half of every iteration's 512 transitions and trains 20 epochs on them.
    assert all(r.samples == 20 * 256 and r.metrics["policy_lag_max"] == 0 for r in rounds)
    assert all(policy == learner for policy, learner in rollouts)


@pytest.mark.parametrize(
    ("config", "frames", "threshold"),
    [("cartpole_a2c.yaml", 20_480, 80.0), ("cartpole_reinforce.yaml", 50_000, 60.0)],
)
def test_on_policy_configs_learn(ray_cluster, tmp_path, config, frames, threshold):
    summary, rollouts, rounds = run_config(
        config, tmp_path, f"controller.total_frames={frames}", "controller.stop_return=null"
    )
    assert summary["frames"] == summary["transitions"] >= frames
    assert all(policy == learner for policy, learner in rollouts)
    assert all(r.metrics["policy_lag_max"] == 0 for r in rounds)
    assert summary["optim_steps"] == summary["iteration"] == len(rounds)  # one step per batch
    assert summary["episode_return_mean"] > threshold  # random play: about 22


def test_sac_learns_pendulum(ray_cluster, tmp_path):
    summary, _, rounds = run_config(
        "pendulum_sac.yaml",
        tmp_path,
        "controller.total_frames=8000",
        "controller.init_random_frames=1000",
        "controller.episode_window=8",  # the last wave of 8 parallel episodes
        "controller.stop_return=null",
        "learner.hidden_sizes=[64, 64]",
        *EVALUATED,
    )
    assert summary["frames"] >= 8000
    assert summary["optim_steps"] == summary["model_version"] >= 7000
    metrics = rounds[-1].metrics
    assert {"loss_qvalue", "loss_actor", "loss_alpha", "alpha"} <= set(metrics)
    assert metrics["alpha"] < 1.0  # the temperature moved toward the entropy target
    assert summary["episode_return_mean"] > -800, summary  # random play: about -1200 to -1300
    policy, _ = assert_load_policy_replays_the_final_evaluation(tmp_path, summary)
    actions = policy.act(np.zeros((5, 3), np.float32))  # the squashed mean, in the bounds
    assert actions.shape == (5, 1) and np.abs(actions).max() <= 2.0


@pytest.mark.e2e
def test_ppo_stopped_with_sigterm_resumes_at_another_size_with_its_iterations_and_lr_schedule(
    tmp_path, joining_env
):
    run_dir = tmp_path / "run"
    args = [
        "--config",
        str(CONFIGS / "cartpole_ppo.yaml"),
        "--set",
        f"run.dir={run_dir}",
        "--set",
        "controller.log_interval_s=0.2",
        "--set",
        "controller.stop_return=null",
        "--set",
        "metrics.enabled=false",
    ]
    with CliRun(*args, stderr=False, env=joining_env) as run:  # both runs on the session's Ray
        run.until_frames(4000)
        run.send_signal(signal.SIGTERM)  # to the driver alone
        stopped = run.summary(timeout=120)
    assert stopped["stop_reason"] == f"signal {int(signal.SIGTERM)}" and stopped["stopped_early"]
    path, manifest = latest_valid(run_dir / "checkpoints")  # loadable, every frame counted
    assert str(path) == stopped["checkpoint"]
    assert manifest["counters"]["collected_frames"] == stopped["frames"]
    assert stopped["iteration"] * 40 == stopped["model_version"] > 0
    stopped_lr = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["learner"][
        "lr"
    ]

    resumed = run_cli(
        *args[:3],
        f"run.dir={tmp_path / 'resumed'}",
        *args[4:],
        "--set",
        f"controller.total_frames={stopped['frames'] + 5120}",
        # at another size (#28): 4 collectors, so batches of 1,024
        "--set",
        "collector.num_collectors=4",
        "--resume",
        stopped["checkpoint"],
        env=joining_env,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["iteration"] == stopped["iteration"] + 5  # 5,120 frames of 1,024
    assert summary["model_version"] == summary["iteration"] * 40
    assert summary["generation"] == stopped["generation"] + 1
    records = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").open()]
    first = records[0]
    lrs = [r["learner"]["lr"] for r in records if "lr" in r["learner"]]
    # The schedule continues from the checkpoint's step: 1e-3 * (1 - step / 8000), never back up.
    assert max(lrs) <= stopped_lr
    assert min(lrs) == pytest.approx(1e-3 * (1 - (summary["model_version"] - 40) / 8000), rel=0.02)
    assert first["frames"] > stopped["frames"]
