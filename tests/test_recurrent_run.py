"""Recurrent on-policy runs on the shared local Ray: memory learned, frames exact, resumes fresh.

The learning check runs the shipped recurrent config on ``tests.memory_envs:cue`` (recall a cue
shown 4 steps earlier), which an LSTM learns in a few thousand frames and a feed-forward policy
cannot: the velocity-masked CartPole needs minutes for the same separation (``services.bench
learn --entries statelesscartpole-ppo-lstm,statelesscartpole-ppo-mlp``).
"""

import numpy as np
import pytest
import ray

from collector.config import OnPolicyTransform
from collector.manage.group import CollectorGroup
from replay.shard import remote_shard
from services.config import load_config
from services.config.spec import model_spec_for
from services.driver.controller import Controller
from tests.conftest import ROOT

CONFIG = ROOT / "deploy" / "configs" / "statelesscartpole_ppo_lstm.yaml"
CUE = [
    "metrics.enabled=false",
    "checkpoint.at_end=false",
    "collector.env_id=tests.memory_envs:cue",
    "collector.num_collectors=1",
    "controller.total_frames=6144",  # 24 iterations of 256
    "controller.stop_return=null",
    "learner.hidden_sizes=[32]",
    "learner.recurrent_hidden_size=32",
    "learner.lr_scheduler=none",
    "learner.gamma=0.9",
    "collector.gamma=0.9",
    "collector.gae_lambda=0.95",
    "learner.onpolicy.num_epochs=4",
    "learner.onpolicy.bptt_length=16",  # 16 sequences of 16 steps per iteration, 8 a minibatch
]

pytestmark = pytest.mark.slow


def train(tmp_path, recurrent):
    overrides = [*CUE, f"checkpoint.dir={tmp_path}", f"learner.recurrent={recurrent}"]
    if recurrent == "none":  # the control stores transitions: no sequences to cut
        overrides.append("learner.onpolicy.bptt_length=0")
    config = load_config(CONFIG, overrides)
    controller = Controller(config)
    returns = []
    controller.register("rollout", lambda c, r: returns.extend(r.episode_returns))
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    return summary, returns


@pytest.fixture(scope="module")
def runs(ray_cluster, tmp_path_factory):
    """The LSTM and the feed-forward control, trained the same way."""
    return {kind: train(tmp_path_factory.mktemp(kind), kind) for kind in ("lstm", "none")}


def test_recurrent_ppo_learns_what_the_feed_forward_policy_cannot(runs):
    (_, lstm_returns), (_, mlp_returns) = runs["lstm"], runs["none"]
    late_lstm, late_mlp = np.mean(lstm_returns[-200:]), np.mean(mlp_returns[-200:])
    assert late_lstm > 0.8  # recalls the cue (at most 1)
    assert abs(late_mlp) < 0.3  # guesses (expected 0)
    assert late_lstm > late_mlp + 0.5


def test_recurrent_runs_count_frames_exactly_and_train_minibatches_of_sequences(runs):
    for summary, _ in runs.values():
        assert summary["frames"] == summary["transitions"] == 6144
        assert summary["iteration"] == 24
        assert summary["optim_steps"] == summary["model_version"] == 24 * 4 * 2


def test_a_restored_collector_restarts_every_episode_with_fresh_state(ray_cluster):
    config = load_config(CONFIG, ["metrics.enabled=false"])
    shard = remote_shard("recurrent-restore", 0, 4096, sampler="fifo", num_cpus=0)
    transform = OnPolicyTransform(sequence_length=8)
    spec = model_spec_for(config)
    group = CollectorGroup(
        "recurrent-restore",
        1,
        config.collector.env_id,
        4,
        spec,
        [shard],
        1,
        num_cpus=0,
        transform=transform,
    )
    group.wait_ready()

    def last_rollout():
        ray.get(shard.clear.remote())
        ray.get(group.rollout(0, 64, {}))  # 16 steps of 4 envs: 8 sequences of 8 steps
        items = ray.get(shard.drain.remote())
        order = np.argsort(items.insertion_id)  # the write's order: env by env, then time
        return {key: value[order] for key, value in items.columns.items()}

    try:
        last_rollout()
        group.pause()
        state = group.state_dicts()
        group.resume()
        carried = last_rollout()
        assert (np.abs(carried["recurrent_state"]).sum(axis=1) > 0).any()  # episodes went on
        group.load_state_dicts(state)
        restored = last_rollout()
        assert restored["recurrent_state"].shape == (8, spec.state_size)
        first = slice(0, 8, 2)  # each env's first sequence: a fresh episode from zeros
        assert restored["reset"][first, 0].all()
        assert (restored["recurrent_state"][first] == 0).all()
    finally:
        group.shutdown()
        ray.kill(shard, no_restart=True)


def test_recurrent_reinforce_trains_on_every_sequence_of_its_episodes(ray_cluster, tmp_path):
    overrides = [
        "metrics.enabled=false",
        "checkpoint.at_end=false",
        f"checkpoint.dir={tmp_path}",
        "collector.env_id=tests.memory_envs:cue",
        "controller.total_frames=200",
        "learner.recurrent=gru",
        "learner.recurrent_hidden_size=16",
        "learner.onpolicy.bptt_length=2",  # episodes of 5 steps: 3 sequences, 1 step padded
    ]
    config = load_config(ROOT / "deploy" / "configs" / "cartpole_reinforce.yaml", overrides)
    controller = Controller(config)
    rounds = []
    controller.register("round", lambda c, r: rounds.append(r))
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    # 4 envs x one 5-step episode per iteration: 20 frames, 12 sequences, one optimizer step
    assert summary["frames"] == summary["transitions"] == 200
    assert summary["iteration"] == len(rounds) == summary["optim_steps"] == 10
    assert all(r.metrics["policy_lag_max"] == 0 for r in rounds)
