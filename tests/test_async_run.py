"""The asynchronous loop end to end on the shared local Ray: IMPALA and APPO (CI-sized runs)."""

from __future__ import annotations

import pytest

from services.config import ConfigError, load_config
from services.driver.controller import Controller
from services.evaluation.evaluator import EvaluationRunner
from services.evaluation.playback import evaluate_policy
from services.policy import load_policy
from tests.conftest import ROOT

CONFIGS = ROOT / "deploy" / "configs"
EVALUATED = ["checkpoint.at_end=true", "evaluation.interval_frames=1000000000"]


def run_config(name: str, tmp_path, *overrides: str):
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
    seen = {"rollouts": 0, "while_training": 0, "rounds": []}

    def on_rollout(c, receipt):
        seen["rollouts"] += 1
        seen["while_training"] += c.pending_round is not None

    controller.register("rollout", on_rollout)
    controller.register("round", lambda c, r: seen["rounds"].append(r))
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    return summary, seen


def assert_frames_exact(summary) -> None:
    """Collected = trained + dropped + queued, every frame from a receipt."""
    assert summary["frames"] == summary["transitions"]
    queued = summary["frames"] - summary["frames_trained"] - summary["frames_dropped"]
    assert 0 <= queued <= 512  # less than a batch of 16 chunks of 32 steps is left untaken
    assert summary["rounds_started"] == summary["rounds_reported"] == summary["optim_steps"]


@pytest.fixture(scope="module")
def impala_run(ray_cluster, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("impala")
    summary, seen = run_config(
        "cartpole_impala.yaml", tmp_path, "controller.total_frames=60000", *EVALUATED
    )
    return summary, seen, tmp_path


def test_impala_learns_with_frames_exact_and_lag_bounded(impala_run):
    summary, seen, _ = impala_run
    assert summary["episode_return_mean"] > 100  # random play: about 22
    assert_frames_exact(summary)
    assert summary["frames_dropped"] == 0 and summary["items_dropped"] == 0
    assert 0 < summary["lag_max"] <= 16  # learner.max_policy_lag: asynchronous, bounded
    metrics = seen["rounds"][-1].metrics
    assert {"rho_mean", "rho_clipped", "entropy", "policy_lag_max"} <= set(metrics)
    assert seen["while_training"] > 0  # collectors delivered while a round was running


def test_impala_policy_loads_and_replays_its_final_evaluation(impala_run):
    summary, _, tmp_path = impala_run
    policy = load_policy(tmp_path)
    assert policy.version == summary["eval_version"] == summary["published_version"]
    replay = evaluate_policy(policy)  # the run's seed, envs and episode count, without Ray
    assert round(replay["return_mean"], 3) == summary["eval_return_mean"]


def test_appo_learns_with_frames_exact(ray_cluster, tmp_path):
    summary, seen = run_config("cartpole_appo.yaml", tmp_path, "controller.total_frames=60000")
    assert summary["episode_return_mean"] > 100
    assert_frames_exact(summary)
    assert {"clip_fraction", "approx_kl", "rho_mean"} <= set(seen["rounds"][-1].metrics)


def test_collectors_keep_collecting_while_a_slow_learner_drops_stale_chunks(ray_cluster, tmp_path):
    summary, seen = run_config(
        "cartpole_impala.yaml",
        tmp_path,
        "controller.total_frames=30000",
        "learner.loss=tests.slow_loss:slow_impala",
        "learner.loss_options={delay_s: 0.1}",
        "learner.max_policy_lag=1",
        "learner.vtrace.queue_batches=8",
        "replay.capacity=2048",
    )
    assert summary["items_dropped"] > 0 and summary["frames_dropped"] > 0
    assert_frames_exact(summary)
    # Rounds take at least 0.1 s each: most rollouts came back while one was running.
    assert seen["while_training"] > seen["rollouts"] / 2


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["learner.max_policy_lag=0"], "learner.max_policy_lag"),
        (["run.deterministic=true"], "run.deterministic"),
        (["replay.sampler=uniform"], "replay.sampler"),
        (["replay.fifo_queue=false"], "replay.fifo_queue"),
        (["learner.global_batch_size=15", "learner.world_size=2"], "learner.global_batch_size"),
        (["replay.capacity=64"], "replay.capacity"),
    ],
)
def test_nonsense_is_refused_before_any_actor_starts(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(CONFIGS / "cartpole_impala.yaml", overrides)
