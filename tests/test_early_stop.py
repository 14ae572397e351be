import math

from services.config import load_config
from services.driver.controller import Controller
from services.observe.early_stop import EarlyStopping


def test_max_mode_waits_patience_frames_beyond_min_delta():
    stopper = EarlyStopping("episode_return_mean", "max", patience_frames=1000, min_delta=1.0)
    assert stopper.update(0, math.nan) is None  # no episode finished yet
    assert stopper.update(100, 10.0) is None
    assert stopper.update(600, 10.5) is None  # within min_delta: not an improvement
    assert stopper.update(900, 12.0) is None  # improvement resets the patience
    assert stopper.update(1800, 12.5) is None
    reason = stopper.update(1900, 11.0)
    assert reason == "episode_return_mean did not improve on 12 for 1000 frames"


def test_min_mode_and_non_finite_values_stop():
    stopper = EarlyStopping("learner.loss_q", "min", patience_frames=10**9)
    assert stopper.value_in({"learner": {"loss_q": 0.5}}) == 0.5
    assert stopper.value_in({"learner": {}}) is None
    assert stopper.update(0, 0.5) is None
    assert stopper.update(10, 0.4) is None and stopper.best == 0.4
    assert stopper.update(20, math.inf) == "learner.loss_q is inf"
    assert stopper.update(30, math.nan) == "learner.loss_q is nan"


def test_controller_stops_when_the_metric_stalls(ray_cluster, tmp_path):
    config = load_config(
        overrides=[
            "run.name=early",
            "controller.total_frames=1000000",
            "controller.log_interval_s=0.2",
            # Epsilon only decreases, so in "max" mode it never improves after the first reading.
            "controller.early_stop_metric=exploration.epsilon",
            "controller.early_stop_patience_frames=3000",
            "collector.epsilon_anneal_frames=100000",
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path}",
        ]
    )
    controller = Controller(config)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    assert summary["stopped_early"] is True
    assert summary["stop_reason"].startswith("early stop: exploration.epsilon did not improve")
    assert 3000 <= summary["frames"] < 100_000
    assert controller.last_checkpoint is not None  # a stop still cuts a final checkpoint
