"""Fault injection on a real local Ray: processes killed by pid, broken envs, stuck collectors.

Each run is CI-sized; the fault is injected from a controller hook at a known point of the run
(the first checkpoint, the Nth receipt), so nothing waits on wall-clock sleeps.
"""

import os
import re
import signal
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest
import ray
import torch
from tensordict import TensorDict

from learner.stepper import DefaultStepper
from services.checkpoints.store import latest_valid
from services.config import load_config
from services.driver.controller import Controller
from services.driver.faults import ComponentFailure, CrashLoop
from tests.cli_run import CliRun

SMALL = [
    "collector.num_collectors=2",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=128",
    "replay.num_shards=2",
    "replay.capacity=20000",
    "replay.health_interval_s=0.2",
    "controller.init_random_frames=500",
    "controller.utd_ratio=0.125",
    "learner.global_batch_size=32",
    "metrics.enabled=false",
]


def small_config(name, *extra):
    return load_config(overrides=[f"run.name={name}", *SMALL, *extra])


def collector_frames(controller) -> int:
    """Frames the collectors themselves stepped and wrote (their own counters)."""
    controller.collectors.pause()
    try:
        return sum(state["frames"] for state in controller.collectors.state_dicts())
    finally:
        controller.collectors.resume()


# -- envs used by the tests (importable by collector processes as tests.test_faults:...) ------
class FailEvery(gym.Wrapper):
    """Raises ValueError at every ``fail_at``-th step of this instance."""

    def __init__(self, env, fail_at):
        super().__init__(env)
        self.fail_at, self.steps = fail_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps % self.fail_at == 0:
            raise ValueError(f"simulated env failure at step {self.steps}")
        return self.env.step(action)


def failing_cartpole(fail_at: int) -> gym.Env:
    """CartPole whose every instance raises at each ``fail_at``-th step."""
    return FailEvery(gym.make("CartPole-v1"), fail_at)


class HangOnce(gym.Wrapper):
    """Blocks forever at its ``hang_at``-th step, once per ``marker`` file."""

    def __init__(self, env, marker, hang_at):
        super().__init__(env)
        self.marker, self.hang_at, self.steps = Path(marker), hang_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.hang_at and not self.marker.exists():
            self.marker.touch()
            threading.Event().wait()  # never set: a simulator that stopped answering
        return self.env.step(action)


def hanging_cartpole(marker: str, hang_at: int) -> gym.Env:
    """CartPole that hangs once (a stuck simulator)."""
    return HangOnce(gym.make("CartPole-v1"), marker, hang_at)


# -- replay shard ---------------------------------------------------------------------------
def test_killed_replay_shard_is_restarted_refilled_and_the_run_completes(
    ray_cluster, tmp_path, caplog
):
    config = small_config(
        "flt-shard",
        "controller.total_frames=6000",
        "checkpoint.interval_frames=1500",
        f"checkpoint.dir={tmp_path}",
    )
    controller = Controller(config)
    killed = {}

    def kill_shard_after_first_cut(ctrl, path, seconds):
        if not killed:
            killed.update(ray.get(ctrl.shards[1].health.remote()))
            os.kill(killed["pid"], signal.SIGKILL)  # as an operator would, by pid

    controller.register("checkpoint", kill_shard_after_first_cut)
    try:
        controller.setup()
        controller.train()
        c = controller.counters
        assert killed
        assert c.replay_restarts == 1 and c.replay_items_lost > 0
        assert c.replay_items_refilled > 0  # from the checkpoint cut before the kill
        pid = killed["pid"]
        assert re.search(
            rf"replay-1 \(node [\d.]+/\w{{8}}, pid {pid}\) died; Ray restarted", caplog.text
        )
        assert c.generation == 0 and c.collector_failures == 0  # nobody else was blamed
        assert c.collected_frames >= 6000
        assert collector_frames(controller) == c.transitions  # every written frame counted
        after = ray.get(controller.shards[1].health.remote())
        assert after["pid"] != killed["pid"] and after["incarnation"] != killed["incarnation"]
        assert after["size"] > 0
        _, manifest = latest_valid(tmp_path)
        assert manifest["counters"]["collected_frames"] == c.collected_frames
        assert manifest["counters"]["replay_items_lost"] == c.replay_items_lost
    finally:
        controller.shutdown()


def test_a_stuck_replay_shard_is_killed_restarted_and_refilled(ray_cluster, tmp_path):
    config = small_config(
        "flt-stuck-shard",
        "controller.total_frames=5000",
        "checkpoint.interval_frames=1500",
        f"checkpoint.dir={tmp_path}",
        # Both the stuck clock and the restart's deadline: a shard's restart (a new process that
        # imports torch) took over 3 s on a loaded 2-core CI machine.
        "replay.restart_timeout_s=10",
    )
    controller = Controller(config)
    hung = {}

    def hang_shard_after_first_cut(ctrl, path, seconds):
        if not hung:
            hung.update(ray.get(ctrl.shards[0].health.remote()))
            # Runs inside the shard (pickled by value): alive, but it answers nothing any more.
            ctrl.shards[0].__ray_call__.remote(lambda shard: threading.Event().wait())

    controller.register("checkpoint", hang_shard_after_first_cut)
    try:
        controller.setup()
        controller.train()
        c = controller.counters
        assert hung and c.replay_restarts == 1 and c.replay_items_refilled > 0
        assert c.generation == 0 and c.collected_frames >= 5000
        after = ray.get(controller.shards[0].health.remote())
        assert after["pid"] != hung["pid"]
    finally:
        controller.shutdown()


# -- learner rank -------------------------------------------------------------------------------
def test_killed_learner_rank_is_restored_as_a_new_generation(ray_cluster, tmp_path, caplog):
    config = small_config(
        "flt-rank",
        "controller.total_frames=4000",
        "checkpoint.interval_frames=1500",
        f"checkpoint.dir={tmp_path}",
    )
    controller = Controller(config)
    killed, published = [], []

    def kill_rank_after_first_cut(ctrl, path, seconds):
        if not killed:
            killed.append(ray.get(ctrl.learners.ranks[0].pid.remote()))
            os.kill(killed[0], signal.SIGKILL)

    controller.register("checkpoint", kill_rank_after_first_cut)
    controller.register("round", lambda ctrl, r: published.append(ctrl.weights.key))
    try:
        controller.setup()
        controller.train()
        c = controller.counters
        assert killed and c.generation == 1
        assert re.search(
            r"learner-0 \(node [\d.]+\) died.*restoring the learners", caplog.text, re.S
        )
        assert published == sorted(published)  # (generation, version) never goes back
        assert c.model_version == c.optim_steps == controller.loop.steps_target()
        assert collector_frames(controller) == c.transitions
    finally:
        controller.shutdown()


# -- collectors ---------------------------------------------------------------------------------
def test_a_collector_crash_loop_stops_the_run_naming_it(ray_cluster):
    config = small_config(
        "flt-loop",
        "controller.total_frames=1000000",
        "collector.crash_loop_deaths=2",
        "collector.max_restarts=5",
    )
    controller = Controller(config)
    pids = []

    def kill_collector_0(ctrl, receipt):
        # Every incarnation of collector 0 is killed once it answers: a death Ray restarted
        # before the next rollout reached the actor fails no rollout and counts for nothing.
        if receipt.collector_id != 0:
            return
        try:
            pid = ray.get(ctrl.collectors.actors[0].pid.remote())
        except ray.exceptions.RayActorError:
            return  # a receipt written just before the kill; the actor is restarting
        if pid not in pids:  # the first time, and again once Ray restarted it and it answered
            pids.append(pid)
            os.kill(pid, signal.SIGKILL)

    controller.register("rollout", kill_collector_0)
    try:
        controller.setup()
        with pytest.raises(ComponentFailure) as failure:
            controller.train()
        message = str(failure.value)
        assert re.search(r"collector-0 \(node [\d.]+/[0-9a-f]{8}\)", message)
        assert "died 2 times" in message and "collector.crash_loop_deaths" in message
        assert len(pids) >= 2 and controller.counters.collected_frames < 1_000_000
    finally:
        controller.shutdown()


def test_env_errors_rebuild_the_envs_then_stop_the_run_past_the_limit(ray_cluster):
    config = small_config(
        "flt-env",
        "collector.num_collectors=1",
        "controller.total_frames=1000000",
        "collector.env_id=tests.test_faults:failing_cartpole",
        "collector.env_kwargs={fail_at: 150}",
        "collector.max_env_errors=2",
    )
    controller = Controller(config)
    try:
        controller.setup()
        with pytest.raises(ComponentFailure) as failure:
            controller.train()
        message = str(failure.value)
        assert re.search(r"collector-0 \(node [\d.]+/[0-9a-f]{8}\)", message)
        assert "env tests.test_faults:failing_cartpole #" in message
        assert "ValueError: simulated env failure" in message
        assert "collector.max_env_errors=2" in message
        c = controller.counters
        assert c.env_errors == 3 and c.collector_failures == 0
        assert c.collected_frames > 0  # rollouts between the errors were counted
        assert collector_frames(controller) >= c.transitions
    finally:
        controller.shutdown()


def test_a_stuck_collector_is_killed_and_the_run_completes(ray_cluster, tmp_path):
    config = small_config(
        "flt-stuck",
        "controller.total_frames=3000",
        "collector.env_id=tests.test_faults:hanging_cartpole",
        f"collector.env_kwargs={{marker: {tmp_path / 'hung'}, hang_at: 60}}",
        "collector.rollout_timeout_s=3",
    )
    controller = Controller(config)
    try:
        controller.setup()
        started = time.monotonic()
        controller.train()
        c = controller.counters
        assert (tmp_path / "hung").exists()
        assert c.collector_failures >= 1 and c.collected_frames >= 3000
        assert time.monotonic() - started < 120
    finally:
        controller.shutdown()


# -- pure parts ----------------------------------------------------------------------------------
def test_crash_loop_counts_deaths_in_a_sliding_window():
    loop = CrashLoop(deaths=3, window_s=10.0)
    assert not loop.record("collector-0", now=0.0)
    assert not loop.record("collector-0", now=5.0)
    assert not loop.record("collector-1", now=6.0)  # another component
    assert not loop.record("collector-0", now=10.5)  # the first death left the window
    assert loop.record("collector-0", now=12.0)


def test_a_non_finite_loss_skips_the_step_and_is_counted():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, batch):
            out = self.net(batch["x"]).mean()
            return {"loss_q": out * batch["scale"][0]}

    loss = Loss()
    stepper = DefaultStepper(torch.optim.SGD(loss.parameters(), lr=0.1))
    before = [p.detach().clone() for p in net.parameters()]
    x = torch.ones(4, 3)
    bad = stepper.step(loss, TensorDict({"x": x, "scale": torch.full((4,), float("nan"))}, [4]))
    assert bad["nonfinite_skipped"].item() == 1.0 and stepper.skipped_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    good = stepper.step(loss, TensorDict({"x": x, "scale": torch.ones(4)}, [4]))
    assert good["nonfinite_skipped"].item() == 0.0
    assert not all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))


# -- signals -------------------------------------------------------------------------------------
@pytest.mark.e2e
# SIGTERM (a supervisor, `kill -TERM -<pgid>`); Ctrl-C's SIGINT takes the same handler
# (services.train.install_signal_handlers; its unit test: tests/test_signals.py).
@pytest.mark.parametrize("signum", [signal.SIGTERM])
def test_a_signal_to_the_whole_process_group_stops_cleanly_within_15_s(tmp_path, signum):
    args = ["--set", "controller.total_frames=1000000", "--set", "controller.log_interval_s=0.5"]
    args += ["--set", "metrics.enabled=false"]
    # its own process group, as under a shell or a supervisor
    with CliRun(*args, run_dir=tmp_path, stderr=False, new_session=True) as run:
        run.until_episodes()
        run.send_signal(signum, group=True)  # the driver and everything in its group
        summary = run.summary(timeout=15)
    assert summary["stopped_early"] is True and summary["stop_reason"] == f"signal {int(signum)}"
    assert summary["frames"] < 1_000_000
    path, manifest = latest_valid(tmp_path / "checkpoints")  # loadable, every frame counted
    assert str(path) == summary["checkpoint"]
    assert manifest["counters"]["collected_frames"] == summary["frames"]
