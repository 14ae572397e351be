"""A CI-sized Ape-X-style Pong run (deploy/configs/pong_dqn.yaml) and the atari extra's refusals."""

import sys

import numpy as np
import pytest

from services.config import ConfigError, load_config
from services.config.spec import check_local_gpus, env_spaces
from services.driver.controller import Controller
from services.evaluation.playback import evaluate_policy
from services.observe.metrics import MetricsExporter
from services.policy import load_policy
from tests.conftest import ROOT

CONFIG = ROOT / "deploy" / "configs" / "pong_dqn.yaml"
FRAMES = 8192  # emulator frames: 2,048 agent steps
CONFIG_ENV = "collector.atari:make_atari"


def test_pong_run_counts_every_frame_once_in_about_one_frame_of_memory(ray_cluster, tmp_path):
    config = load_config(
        CONFIG,
        [
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
            "checkpoint.interval_frames=0",
            "controller.log_interval_s=1",
            f"controller.total_frames={FRAMES}",
            "controller.init_random_frames=2048",
            "controller.utd_ratio=0.01",
            "collector.num_collectors=2",
            "collector.envs_per_collector=2",
            "collector.rollout_frames=256",
            "replay.capacity=4096",
            "replay.num_shards=2",
            f"replay.mmap_dir={tmp_path / 'mmap'}",
            "learner.target_update_interval=20",
        ],
    )
    controller = Controller(config)
    exporter = MetricsExporter(port=0, run_id="pong")  # 0: an OS-chosen port
    exporter.attach(controller)
    rollouts, rounds, explore = [], [], []
    controller.register("rollout", lambda c, r: rollouts.append(r))
    controller.register("round", lambda c, r: rounds.append(r))
    controller.register("round", lambda c, r: explore.append(c.exploration()))
    final = {}

    def inspect_replay(c):  # before the shards stop
        if not final:
            final.update(stats=c.replay.stats(), sample=c.replay.sample(8, beta=0.4))

    controller.register("shutdown", inspect_replay)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
        exporter.close()
    stats, sample = final["stats"], final["sample"]
    # Frames are emulator frames: 4 per stored transition, counted once from receipts.
    assert summary["frames"] == 4 * summary["transitions"] >= FRAMES
    assert summary["frames"] - FRAMES < 2 * 4 * 256  # at most one rollout per collector over
    assert sum(s["write_count"] for s in stats) == summary["transitions"]
    assert sum(r.frames for r in rollouts) == summary["transitions"]
    assert summary["optim_steps"] == summary["model_version"] >= 40
    assert "loss_q" in rounds[-1].metrics
    # Each collector explored with its own Ape-X epsilon once learning began.
    assert explore[-1]["epsilons"] == pytest.approx((0.4, 0.4**8))
    exported = exporter.registry.get_sample_value(
        "relayrl_exploration", {"run": "pong", "param": "epsilons[1]"}
    )
    assert exported == pytest.approx(0.4**8)  # Prometheus shows every collector's epsilon
    # About one 84x84 frame per transition held, instead of the 8 of stacked pairs (56,448 B).
    per_transition = sum(s["bytes"] for s in stats) / sum(s["size"] for s in stats)
    assert 84 * 84 < per_transition < 8000
    assert sample["observation"].shape == (8, 4, 84, 84)
    assert sample["observation"].dtype == np.uint8
    # A whole 3-step window's next stack begins with its observation's newest frame.
    whole = np.isclose(sample["n_step_discount"], 0.99**3)
    assert whole.any()
    np.testing.assert_array_equal(
        sample["next_observation"][whole][:, 0], sample["observation"][whole][:, 3]
    )
    # The final checkpoint holds each shard's frame ring.
    assert len(list((tmp_path / "ckpt").rglob("frames.npy"))) == 2

    # Loaded without Ray: stacked frames or one frame at a time; played and recorded on a
    # shortened evaluation env
    short = {"game": "ALE/Pong-v5", "max_episode_steps": 40}
    policy = load_policy(
        tmp_path / "ckpt",
        overrides={"evaluation.env_kwargs": short, "evaluation.env_id": CONFIG_ENV},
    )
    assert policy.version == summary["model_version"] and policy.family == "q"
    stacks = sample["observation"]
    actions = policy.act(stacks)
    assert actions.shape == (8,) and actions.max() < 6
    for frame in stacks[0]:  # the policy's own stack of the same four frames
        last = policy.act(frame)
    assert last == actions[0]
    played = evaluate_policy(policy, episodes=1, num_envs=1, video_dir=tmp_path / "video")
    assert 30 <= played["lengths"][0] <= 40  # the no-ops after reset count toward the limit
    assert played["episodes"] == 1 and len(played["video_files"]) == 1


def test_a_config_needing_the_atari_extra_is_refused_naming_it(monkeypatch):
    config = load_config(CONFIG)
    monkeypatch.setitem(sys.modules, "ale_py", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r'collector\.env_id: .*pip install "relayrl\[atari\]"'):
        env_spaces(config)


def test_the_gpu_variant_is_refused_on_a_host_without_cuda(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = load_config(ROOT / "deploy" / "configs" / "pong_dqn_gpu.yaml")
    assert config.learner.resolved_backend == "nccl"
    with pytest.raises(ConfigError, match=r"learner\.resources_per_rank: .*no CUDA device"):
        check_local_gpus(config, cuda_available=False)
    check_local_gpus(config, cuda_available=True)  # accepted where a device exists


def test_frame_stack_is_refused_for_flat_observations():
    with pytest.raises(ConfigError, match=r"replay\.frame_stack"):
        env_spaces(load_config(overrides=["replay.frame_stack=4"]))


def test_external_inserts_are_refused_with_frame_deduplicated_replay():
    config = load_config(CONFIG, ["grpc.port=0"])  # 0: an OS-chosen port, nothing binds here
    with pytest.raises(ConfigError, match=r"grpc\.port: .*replay\.frame_stack"):
        env_spaces(config)
    env_spaces(load_config(CONFIG, ["grpc.port=0", "replay.frame_stack=0"]))


def test_ppo_on_pong_builds_a_pixel_actor_critic_and_keeps_stacks():
    from collector.networks.cnn import PixelActorCriticSpec
    from services.config.spec import model_spec_for

    pong = [
        "algorithm=ppo",
        "collector.env_id=collector.atari:make_atari",
        "collector.frame_skip=4",
    ]
    spec = model_spec_for(load_config(overrides=[*pong, "learner.pixel_torso=impala"]))
    assert isinstance(spec, PixelActorCriticSpec)
    assert (spec.frame_stack, spec.num_actions, spec.torso) == (4, 6, "impala")
    with pytest.raises(ConfigError, match=r"replay\.frame_stack: .*on-policy tables keep stacks"):
        env_spaces(load_config(overrides=[*pong, "replay.frame_stack=4"]))
