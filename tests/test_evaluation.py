"""The evaluation core (schedule, coalescing, exact episodes), retention by metric, config."""

import json

import numpy as np
import pytest
import torch

from collector.envs.vector import make_vector_env
from services.checkpoints.retention import BestCheckpointStore, checkpoint_score
from services.config import ConfigError, load_config
from services.config.spec import model_spec_for
from services.evaluation.schedule import (
    EvalResult,
    EvalSchedule,
    episode_quotas,
    metric_value,
    run_episodes,
)
from services.observe.early_stop import EarlyStopping


def result(version, frames, mean):
    return EvalResult(version, frames, (mean - 1.0, mean + 1.0), (10, 12), 0.5)


def test_due_intervals_while_one_runs_coalesce_into_one_with_the_newest_weights():
    schedule = EvalSchedule(1000)
    assert [schedule.due(f) for f in (0, 500, 999)] == [False, False, False]
    assert schedule.due(1000) is True
    schedule.started(version=7, frames=1000)
    # three intervals elapse during the evaluation: none starts, one is remembered
    assert [schedule.due(f) for f in (2000, 3100, 4200)] == [False, False, False]
    assert schedule.pending and schedule.coalesced == 2
    assert schedule.finished(result(7, 1000, 20.0)) is True  # start the coalesced one now
    schedule.started(version=30, frames=4300)
    assert schedule.due(4900) is False and not schedule.pending  # 5000 not reached yet
    assert schedule.finished(result(30, 4300, 40.0)) is False
    assert schedule.completed == 2 and schedule.last["version"] == 30
    assert schedule.next_due_frames == 5000


def test_run_at_end_is_skipped_when_the_last_evaluation_used_the_final_version():
    schedule = EvalSchedule(1000)
    assert schedule.needs_final(5)
    schedule.started(version=5, frames=1000)
    assert not schedule.needs_final(5)  # the running one evaluates it
    schedule.finished(result(5, 1000, 10.0))
    assert not schedule.needs_final(5) and schedule.needs_final(6)


def test_a_checkpoint_keeps_the_next_due_frame_and_the_last_result_and_drops_work_in_flight():
    schedule = EvalSchedule(1000)
    schedule.due(1000)
    schedule.started(version=3, frames=1000)
    schedule.finished(result(3, 1000, 15.0))
    schedule.due(2500)
    schedule.started(version=9, frames=2500)  # in flight at the cut
    state = json.loads(json.dumps(schedule.state_dict()))
    assert set(state) == {"next_due_frames", "last"}
    restored = EvalSchedule(1000)
    restored.load_state_dict(state)
    assert restored.next_due_frames == 3000 and not restored.running
    assert restored.last["version"] == 3 and restored.last["episode_return_mean"] == 15.0


def test_episodes_are_counted_exactly_with_the_greedy_policy():
    assert episode_quotas(7, 3) == [3, 2, 2] and sum(episode_quotas(5, 8)) == 5
    config = load_config()
    spec = model_spec_for(config)
    torch.manual_seed(0)
    network = spec.build().eval()
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    envs = make_vector_env("CartPole-v1", 3)
    with torch.inference_mode():
        returns, lengths = run_episodes(envs, policy, 7, [1, 2, 3])
        again, _ = run_episodes(envs, policy, 7, [1, 2, 3])
    assert len(returns) == len(lengths) == 7
    assert returns == [float(n) for n in lengths]  # CartPole: reward 1 per step
    assert sorted(again) == sorted(returns)  # greedy and seeded: reproducible


def test_metric_lookup_accepts_slashes_for_early_stopping_and_retention():
    record = {"evaluation": {"episode_return_mean": 42.0}, "learner": {"loss_q": 0.5}}
    assert metric_value(record, "evaluation/episode_return_mean") == 42.0
    assert metric_value(record, "learner.loss_q") == 0.5 and metric_value(record, "x/y") is None
    stopper = EarlyStopping("evaluation/episode_return_mean", "max", patience_frames=10)
    assert stopper.value_in(record) == 42.0


def _checkpoint(root, frames, eval_mean):
    path = root / f"ckpt-{frames:012d}-0"
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"run_id": "run-a"}))  # rotation: run-a's
    last = None if eval_mean is None else {"episode_return_mean": eval_mean, "version": frames}
    driver = {"episode_returns": [1.0], "evaluation": {"next_due_frames": 0, "last": last}}
    (path / "driver.json").write_text(json.dumps(driver))
    return path


def test_keep_best_keeps_the_best_by_metric_next_to_the_newest(tmp_path):
    store = BestCheckpointStore(
        tmp_path, keep=2, keep_best=2, metric="evaluation/episode_return_mean", owner="run-a"
    )
    scores = {1000: None, 2000: 50.0, 3000: 200.0, 4000: 120.0, 5000: 80.0, 6000: 90.0}
    for frames, score in scores.items():
        _checkpoint(tmp_path, frames, score)
        store.rotate()
    kept = {int(p.name.split("-")[1]) for p in store.checkpoints()}
    assert kept == {3000, 4000, 5000, 6000}  # best two (200, 120) + newest two
    assert checkpoint_score(store.best()[0], "evaluation/episode_return_mean") == 200.0
    low = BestCheckpointStore(
        tmp_path,
        keep=1,
        keep_best=1,
        metric="evaluation/episode_return_mean",
        mode="min",
        owner="run-a",
    )
    low.rotate()
    assert {int(p.name.split("-")[1]) for p in low.checkpoints()} == {5000, 6000}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["evaluation.episodes=0"], "evaluation.episodes"),
        (["evaluation.interval_frames=-1"], "evaluation.interval_frames"),
        (["checkpoint.keep_best=1"], "checkpoint.best_metric"),
        (["checkpoint.best_mode=up"], "checkpoint.best_mode"),
        (["checkpoint.best_metric=loss"], "checkpoint.best_metric"),
    ],
)
def test_invalid_evaluation_and_retention_settings_are_refused(overrides, field):
    with pytest.raises(ConfigError, match=rf"^{field}:"):
        load_config(overrides=overrides)
