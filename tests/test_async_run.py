"""The asynchronous loop end to end on the shared local Ray: IMPALA and APPO (CI-sized runs)."""

from __future__ import annotations

import os
import re
import signal
import urllib.request

import pytest
import ray

from collector.niceness import thread_niceness
from services.config import ConfigError, load_config
from services.driver.controller import Controller
from services.evaluation.evaluator import EvaluationRunner
from services.evaluation.playback import evaluate_policy
from services.observe.metrics import MetricsExporter
from services.policy import load_policy
from tests.conftest import ROOT

CONFIGS = ROOT / "deploy" / "configs"
EVALUATED = ["checkpoint.at_end=true", "evaluation.interval_frames=1000000000"]


def run_config(name: str, tmp_path, *overrides: str, scrape: bool = False):
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
        if "niceness" not in seen:  # collector 0's threads, learner rank 0's (one node here)
            collector = ray.get(c.collectors.actors[0].pid.remote())
            learner = ray.get(c.learners.ranks[0].pid.remote())
            seen["niceness"] = (
                thread_niceness(collector),
                os.getpriority(os.PRIO_PROCESS, learner),
            )

    controller.register("rollout", on_rollout)
    controller.register("round", lambda c, r: seen["rounds"].append(r))
    exporter = MetricsExporter(run_id=controller.run_id) if scrape else None
    if exporter is not None:
        exporter.attach(controller)
    try:
        summary = controller.run()
        if exporter is not None:
            with urllib.request.urlopen(exporter.url, timeout=10) as reply:
                seen["scrape"] = reply.read().decode()
    finally:
        controller.shutdown()
        if exporter is not None:
            exporter.close()
    return summary, seen


def assert_frames_exact(summary, batch: int = 8, steps: int = 1) -> None:
    """Collected = trained + dropped + queued, every frame from a receipt.

    ``batch`` chunks make ``steps`` optimizer steps (IMPALA's config: 8 and 1); a round takes
    whole batches.
    """
    assert summary["frames"] == summary["transitions"]
    queued = summary["frames"] - summary["frames_trained"] - summary["frames_dropped"]
    assert 0 <= queued <= 1024  # less than a batch (at most 32 chunks of 32 steps) is left
    assert summary["rounds_started"] == summary["rounds_reported"] > 0
    assert summary["items_taken"] == summary["items_reported"]
    assert summary["items_taken"] % batch == 0  # whole batches
    assert summary["optim_steps"] == summary["items_taken"] // batch * steps


@pytest.fixture(scope="module")
def impala_run(ray_cluster, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("impala")
    summary, seen = run_config(
        "cartpole_impala.yaml",
        tmp_path,
        "controller.total_frames=60000",
        "collector.nice=4",
        *EVALUATED,
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


def test_collector_nice_lowers_every_collector_thread_below_the_learner(impala_run):
    _, seen, _ = impala_run
    collector, learner = seen["niceness"]
    assert len(collector) > 3  # Ray's threads, the rollout and control threads
    assert set(collector.values()) == {min(19, learner + 4)}  # Ray's workers start at 15


def test_impala_policy_loads_and_replays_its_final_evaluation(impala_run):
    summary, _, tmp_path = impala_run
    policy = load_policy(tmp_path)
    assert policy.version == summary["eval_version"] == summary["published_version"]
    replay = evaluate_policy(policy)  # the run's seed, envs and episode count, without Ray
    assert round(replay["return_mean"], 3) == summary["eval_return_mean"]


def test_appo_learns_through_live_resizes_of_collectors_shards_and_ranks(
    ray_cluster, tmp_path, caplog
):
    config = load_config(
        CONFIGS / "cartpole_appo.yaml",
        [
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path}",
            "checkpoint.at_end=false",
            "controller.total_frames=60000",
            "collector.num_collectors=1",
        ],
    )
    controller = Controller(config)
    controller.inbox.enable(controller)  # as the gRPC server does: Control/Scale requests
    rounds: list = []
    steps = [  # (after this many rounds, the sizes asked for)
        (6, {"collectors": 2, "shards": 2, "world_size": 2}),  # each rank: 16 chunks a round
        (24, {"collectors": 1, "shards": 1, "world_size": 1}),
    ]
    asked: list = []

    def on_round(ctrl, receipt):
        rounds.append(receipt)
        if steps and len(rounds) == steps[0][0]:
            asked.append(ctrl.inbox.request_scale(steps.pop(0)[1]))

    controller.register("round", on_round)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    assert [f.result(timeout=0) for f in asked] and not steps
    assert summary["generation"] == 2  # two world-size changes
    assert summary["episode_return_mean"] > 100
    assert_frames_exact(summary, batch=32, steps=2)
    assert "frames not checked" not in caplog.text  # the loop's own check ran and held
    assert {"clip_fraction", "approx_kl", "rho_mean"} <= set(rounds[-1].metrics)


def test_collectors_keep_collecting_while_a_slow_learner_drops_stale_chunks(ray_cluster, tmp_path):
    summary, seen = run_config(
        "cartpole_impala.yaml",
        tmp_path,
        "controller.total_frames=12000",
        "learner.loss=tests.slow_loss:slow_impala",
        "learner.loss_options={delay_s: 0.1}",
        "learner.max_policy_lag=1",
        "learner.vtrace.queue_batches=8",
        "learner.vtrace.max_round_batches=4",
        "replay.capacity=2048",
        scrape=True,
    )
    assert summary["items_dropped"] > 0 and summary["frames_dropped"] > 0
    assert_frames_exact(summary)
    # The queue ran deep behind the slow learner: rounds took several batches at once.
    assert summary["items_taken"] > 8 * summary["rounds_started"]
    assert max(sum(r.lags) for r in seen["rounds"]) > 8
    assert summary["lag_counts"][-1] == summary["items_dropped"]  # the last bin: beyond 1
    scrape = seen["scrape"]
    dropped = re.search(
        r'relayrl_rollouts_dropped_total\{reason="stale",run="[^"]+"\} (\S+)', scrape
    )
    assert dropped and float(dropped[1]) == summary["items_dropped"], scrape[-2000:]
    count = re.search(r"relayrl_trained_policy_lag_versions_count\{[^}]*\} (\S+)", scrape)
    assert count and float(count[1]) == summary["items_taken"]
    for gauge in ("relayrl_learner_queue_chunks", "relayrl_collector_wait_fraction"):
        assert re.search(rf"^{gauge}\{{", scrape, re.M), gauge
    # Rounds take at least 0.1 s each: most rollouts came back while one was running.
    assert seen["while_training"] > seen["rollouts"] / 2


def test_a_one_batch_queue_fills_the_next_batch_while_the_round_trains(ray_cluster, tmp_path):
    # The queue holds one batch: the round that takes it must free the room at once, so the
    # collectors fill the next batch during the (slowed) round instead of after it.
    summary, seen = run_config(
        "cartpole_impala.yaml",
        tmp_path,
        "controller.total_frames=8000",
        "learner.loss=tests.slow_loss:slow_impala",
        "learner.loss_options={delay_s: 0.1}",
        "learner.vtrace.queue_batches=1",
        "learner.max_policy_lag=4",
    )
    assert_frames_exact(summary)
    assert summary["frames_dropped"] == 0
    assert seen["while_training"] > seen["rollouts"] / 2
    # After the first round every batch was acted by weights one round old.
    assert summary["policy_lag_p50"] == 1


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["learner.max_policy_lag=0"], "learner.max_policy_lag"),
        (["run.deterministic=true"], "run.deterministic"),
        (["replay.sampler=uniform"], "replay.sampler"),
        (["replay.fifo_queue=false"], "replay.fifo_queue"),
        (["learner.global_batch_size=15", "learner.world_size=2"], "learner.global_batch_size"),
        (["replay.capacity=64"], "replay.capacity"),
        (["learner.vtrace.max_round_batches=5"], "learner.vtrace.max_round_batches"),
    ],
)
def test_nonsense_is_refused_before_any_actor_starts(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(CONFIGS / "cartpole_impala.yaml", overrides)


def test_a_killed_collector_and_a_resume_lose_no_counted_frame(ray_cluster, tmp_path):
    root = tmp_path / "ckpts"
    common = ["checkpoint.interval_frames=4000", f"checkpoint.dir={root}", "checkpoint.keep=5"]
    config = load_config(
        CONFIGS / "cartpole_impala.yaml",
        ["metrics.enabled=false", "controller.total_frames=12000", "collector.nice=4", *common],
    )
    first = Controller(config)
    killed: list[int] = []
    restarted: list[dict[int, int]] = []  # the restarted collector's threads' niceness

    def kill_collector_0(ctrl, receipt):
        if receipt.collector_id == 0 and killed and not restarted:
            restarted.append(thread_niceness(ray.get(ctrl.collectors.actors[0].pid.remote())))
        if receipt.collector_id != 0 or killed or ctrl.counters.rollouts < 6:
            return
        try:
            killed.append(ray.get(ctrl.collectors.actors[0].pid.remote()))
        except ray.exceptions.RayActorError:
            return
        os.kill(killed[0], signal.SIGKILL)  # as an operator would, by pid

    first.register("rollout", kill_collector_0)
    try:
        summary = first.run()
    finally:
        first.shutdown()
    assert killed and summary["collector_failures"] >= 1
    assert restarted and set(restarted[0].values()) == {19}  # Ray's 15 + 4, again after restart
    assert summary["frames"] >= 12000
    assert_frames_exact(summary)
    resumed = load_config(
        CONFIGS / "cartpole_impala.yaml",
        ["metrics.enabled=false", "controller.total_frames=16000", *common],
    )
    second = Controller(resumed, resume_from=root)
    try:
        again = second.run()
    finally:
        second.shutdown()
    assert again["frames"] >= 16000 and again["lineage"] == [summary["run_id"]]
    assert again["items_taken"] > summary["items_taken"]  # the queue's accounting continued
    assert again["rounds_started"] == again["optim_steps"]  # one step per round, both runs
    assert sum(again["lag_counts"]) == again["items_taken"]
    assert_frames_exact(again)


def test_a_learner_rank_killed_mid_round_loses_no_counted_frame(ray_cluster, tmp_path, caplog):
    config = load_config(
        CONFIGS / "cartpole_impala.yaml",
        [
            "metrics.enabled=false",
            "controller.total_frames=16000",
            "checkpoint.interval_frames=4000",
            f"checkpoint.dir={tmp_path}",
        ],
    )
    controller = Controller(config)
    killed: list[int] = []

    def kill_rank_during_a_round(ctrl, receipt):
        if killed or ctrl.last_checkpoint is None or ctrl.pending_round is None:
            return
        killed.append(ray.get(ctrl.learners.ranks[0].pid.remote()))
        os.kill(killed[0], signal.SIGKILL)  # its round is lost with the generation

    controller.register("rollout", kill_rank_during_a_round)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    assert killed and summary["generation"] == 1
    assert "restoring the learners" in caplog.text
    assert summary["rounds_started"] == summary["rounds_reported"] + 1
    assert summary["items_lost"] == config.learner.global_batch_size
    # Every counted frame is trained, dropped, queued or in the lost round's chunks (checked
    # by the loop at the end: a breach raises ProtocolError).
    steps = config.collector.rollout_frames // config.collector.envs_per_collector
    room = (summary["items_lost"] + summary["queued_chunks"]) * steps
    left = summary["frames"] - summary["frames_trained"] - summary["frames_dropped"]
    assert 0 <= left <= room


def test_appo_minibatches_of_steps_learn_under_ddp(ray_cluster, tmp_path):
    """``learner.vtrace.minibatch_unit: steps`` on 2 ranks: V-trace once per pass, then steps."""
    summary, seen = run_config(
        "cartpole_appo.yaml",
        tmp_path,
        "controller.total_frames=40000",
        "learner.vtrace.minibatch_unit=steps",
        "learner.world_size=2",
        "collector.num_collectors=1",
    )
    assert summary["episode_return_mean"] > 60  # random play: about 22
    assert_frames_exact(summary, batch=32, steps=2)
    receipt = seen["rounds"][-1]
    assert receipt.samples == 16 * 32  # each rank: its 16 chunks' 32 steps, one pass
    assert {"clip_fraction", "approx_kl", "rho_mean"} <= set(receipt.metrics)
