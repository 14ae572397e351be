"""R2D2 on Atari Pong frames through a local Ray (#39), each frame stored once in the sequences."""

import json

import numpy as np
import pytest

from replay.sequence_frames import FRAMES_COLUMN
from services.config import load_config
from services.driver.controller import Controller
from tests.conftest import ROOT

CONFIG = ROOT / "deploy" / "configs" / "pong_r2d2_gpu.yaml"
FRAMES = 2400  # emulator frames: 600 agent steps


@pytest.mark.slow  # about a minute on a busy 2-core machine (Ray actors starting)
def test_pixel_r2d2_trains_from_sequences_that_store_each_frame_once(ray_cluster, tmp_path):
    config = load_config(
        CONFIG,
        [
            "collector.env_kwargs={game: ALE/Pong-v5, frame_stack: 4}",
            "replay.frame_stack=4",
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
            "checkpoint.interval_frames=0",
            "controller.log_interval_s=1",
            f"controller.total_frames={FRAMES}",
            "controller.init_random_frames=400",
            "controller.utd_ratio=0.01",
            "collector.num_collectors=2",
            "collector.envs_per_collector=1",
            "collector.rollout_frames=32",
            "collector.num_cpus=0.25",
            "replay.capacity=256",
            "replay.num_shards=2",
            "replay.storage=memory",
            "replay.sequence_length=8",
            "replay.sequence_overlap=4",
            "replay.burn_in=2",
            "learner.resources_per_rank={CPU: 1}",
            "learner.global_batch_size=4",
            "learner.hidden_sizes=[32]",
            "learner.recurrent_hidden_size=32",
            "learner.target_update_interval=10",
        ],
    )
    controller = Controller(config)
    rounds, final = [], {}
    controller.register("round", lambda c, r: rounds.append(r))

    def inspect_replay(c):  # before the shards stop
        if not final:
            final.update(stats=c.replay.stats(), sample=c.replay.sample(4, beta=0.6))

    controller.register("shutdown", inspect_replay)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    # Frames are emulator frames, each agent step counted once however many sequences hold it.
    assert summary["frames"] == 4 * summary["transitions"] >= FRAMES
    assert summary["optim_steps"] == summary["model_version"] >= 15
    assert np.isfinite(float(rounds[-1].metrics["loss_q"]))
    stats, sample = final["stats"], final["sample"]
    assert sum(s["size"] for s in stats) >= 8
    # The shards hold each sequence's 8 + 4 frames, not 9 stacks of 4; the learner rebuilt them.
    assert "observation" not in sample and sample[FRAMES_COLUMN].shape == (4, 12, 84, 84)
    per_item = sum(s["bytes"] for s in stats) / sum(s["size"] for s in stats)
    assert per_item < 13 * 84 * 84 < 9 * 4 * 84 * 84 / 2.5
    # The final checkpoint saved the compact column, each shard its own files (each collector
    # writes to its own shard).
    tables = [json.loads(p.read_text()) for p in (tmp_path / "ckpt").rglob("replay-*/table.json")]
    saved = [{c["key"] for c in table["columns"]} for table in tables]
    assert len(saved) == 2
    assert all(FRAMES_COLUMN in keys and "observation" not in keys for keys in saved)
