"""Consistent cuts, exact resume, clean stop, refusal of bad checkpoints (real Ray, real files)."""

import json

import numpy as np
import pytest
import ray
import torch

from services import train
from services.checkpoints.store import sha256_file, verify
from services.config import load_config
from services.driver.controller import Controller
from services.run.launch import prepare_run
from tests.conftest import run_cli

SMALL = [
    "collector.num_collectors=2",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=128",
    "replay.num_shards=2",
    "replay.capacity=20000",
    "controller.init_random_frames=500",
    "controller.utd_ratio=0.125",
    "learner.global_batch_size=32",
    "metrics.enabled=false",
]


def small_config(name, *extra):
    return load_config(overrides=[f"run.name={name}", *SMALL, *extra])


def test_cut_is_consistent_and_resume_is_exact(ray_cluster, tmp_path):
    root = tmp_path / "ckpts"
    config = small_config(
        "ck-a",
        "controller.total_frames=3000",
        "checkpoint.interval_frames=1000",
        f"checkpoint.dir={root}",
        "checkpoint.keep=5",
    )
    cuts = []

    def at_cut(controller, path, seconds):
        stats = controller.replay.stats()
        c = controller.counters
        cuts.append(
            {
                "path": path,
                "writes": sum(s["write_count"] for s in stats),
                "transitions": c.transitions,
                "frames": c.collected_frames,
                "optim_steps": c.optim_steps,
                "version": controller.learners.version,
                "manifest": verify(path)["counters"],
            }
        )

    first = Controller(config)
    first.register("checkpoint", at_cut)
    try:
        first.setup()
        first.train()
        params = first.learners.parameters()
    finally:
        first.shutdown()
    assert len(cuts) >= 3  # two periodic cuts and the one at the end
    for cut in cuts:
        assert cut["writes"] == cut["transitions"] == cut["frames"] > 0
        assert cut["version"] == cut["optim_steps"]
        assert cut["manifest"]["collected_frames"] == cut["frames"]
        assert cut["manifest"]["optim_steps"] == cut["optim_steps"]
    final = cuts[-1]
    saved = torch.load(final["path"] / "learner-0.pt", weights_only=True)
    assert saved["version"] == final["optim_steps"]
    for name, value in params.items():
        assert torch.equal(value, saved["loss"][f"value_network.{name}"])
    replay_sums = {
        rel: info["sha256"]
        for rel, info in verify(final["path"])["files"].items()
        if rel.startswith("replay-")
    }

    # "Kill" the first run (its actors are gone) and resume from the rotation directory.
    resumed_config = small_config(
        "ck-b", "controller.total_frames=5000", f"checkpoint.dir={tmp_path / 'ckpts-b'}"
    )
    second = Controller(resumed_config, resume_from=root)
    try:
        second.setup()
        c = second.counters
        assert c.collected_frames == final["frames"]
        assert c.optim_steps == c.model_version == final["optim_steps"]
        assert c.generation == 1 and second.weights.generation == 1
        assert second.weights.version == final["optim_steps"]
        restored = second.learners.parameters()
        for name, value in params.items():
            torch.testing.assert_close(restored[name], value, rtol=0, atol=0)
        # Replay contents are bit-identical: dumping them again gives the same checksums.
        redump = tmp_path / "redump"
        redump.mkdir()
        second.replay.dump(redump)
        for rel, digest in replay_sums.items():
            assert sha256_file(redump / rel) == digest, rel
        second.train()
        assert second.counters.collected_frames >= 5000
        assert second.counters.model_version > final["optim_steps"]
        moved = second.learners.parameters()
        assert any(not torch.equal(moved[k], params[k]) for k in params)
    finally:
        second.shutdown()


def test_dead_learner_is_restored_from_the_latest_checkpoint(ray_cluster, tmp_path):
    config = small_config(
        "ck-d",
        "collector.num_collectors=1",  # the rank is killed; one collector and shard feed it
        "replay.num_shards=1",
        "controller.total_frames=4000",
        "checkpoint.interval_frames=1500",
        f"checkpoint.dir={tmp_path}",
    )
    controller = Controller(config)
    killed = []

    def kill_rank_after_first_cut(ctrl, path, seconds):
        if not killed:
            killed.append(ctrl.counters.optim_steps)
            ray.kill(ctrl.learners.ranks[0], no_restart=True)

    controller.register("checkpoint", kill_rank_after_first_cut)
    try:
        controller.setup()
        controller.train()
        c = controller.counters
        assert killed and c.generation == 1
        assert c.model_version == c.optim_steps == controller.loop.steps_target()
        assert controller.weights.generation == 1
    finally:
        controller.shutdown()


# A SIGTERM leaves a loadable final checkpoint of every counted frame and exits 0: to the driver
# alone in tests/test_algorithms_run.py (a PPO run, then resumed from that checkpoint), to its
# whole process group in tests/test_faults.py (within 15 s). Each is one CLI run.


@pytest.mark.e2e
def test_bad_checkpoints_are_refused_and_older_ones_stay_loadable(tmp_path, capsys, joining_env):
    run_dir = tmp_path / "run"
    # One collector and one shard (the defaults are 2 of each): fewer actors to start, twice.
    one_each = ["collector.num_collectors=1", "replay.num_shards=1"]
    # The run that writes the checkpoints runs in this process on the session's Ray, as the CLI
    # runs it (prepare_run, execute), without a CLI's own start-up; the resume below is the CLI.
    config = load_config(
        overrides=[
            *one_each,
            "controller.total_frames=3000",
            "checkpoint.interval_frames=1000",
            f"run.dir={run_dir}",
            "metrics.enabled=false",
        ]
    )
    assert prepare_run(config).execute()["frames"] >= 3000
    capsys.readouterr()  # its output; the refusals' is read below
    rotation = run_dir / "checkpoints"
    checkpoints = sorted(p for p in rotation.iterdir() if p.name.startswith("ckpt-"))
    assert len(checkpoints) == 3
    newest, previous = checkpoints[-1], checkpoints[-2]
    tensor_file = next(p for p in sorted(newest.rglob("*.npy")) if p.stat().st_size > 100)
    tensor_file.write_bytes(tensor_file.read_bytes()[:-64])

    # The refusals come before Ray starts: the CLI's main in this process, no start-up each.
    refused = train.main(["--resume", str(newest), "--set", f"run.dir={tmp_path / 'r1'}"])
    err = capsys.readouterr().err
    assert refused == 2
    assert tensor_file.name in err and "Ray" not in err

    conflict = train.main(
        [
            "--resume",
            str(previous),
            "--set",
            "collector.env_id=Acrobot-v1",
            "--set",
            f"run.dir={tmp_path / 'r2'}",
        ]
    )
    assert conflict == 2 and "collector.env_id" in capsys.readouterr().err

    resumed = run_cli(
        "--resume",
        str(rotation),
        *(arg for setting in one_each for arg in ("--set", setting)),
        "--set",
        "controller.total_frames=4000",
        "--set",
        f"run.dir={tmp_path / 'r3'}",
        "--set",
        "metrics.enabled=false",
        env=joining_env,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "skipping invalid checkpoint" in resumed.stderr and tensor_file.name in resumed.stderr
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    previous_frames = verify(previous)["counters"]["collected_frames"]
    assert summary["frames"] >= 4000 > previous_frames
    assert np.isfinite(summary["optim_steps"])
