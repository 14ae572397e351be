"""Runs sharing one Ray cluster: distinct actors and checkpoints, lineage on resume, placement."""

import threading
import time

import pytest
import ray
from ray.util import placement_group_table

from services.checkpoints.store import latest_valid
from services.config import load_config
from services.config.spec import model_spec_for
from services.driver.controller import Controller
from services.driver.placement import PlacementError

TINY = [
    "run.name=shared",  # both runs use one human name: only the run ids tell them apart
    "collector.num_collectors=1",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=128",
    "replay.num_shards=1",
    "replay.capacity=10000",
    "controller.init_random_frames=500",
    "controller.utd_ratio=0.125",
    "learner.global_batch_size=32",
    "metrics.enabled=false",
]


def named_actors_of(run_id: str) -> list[str]:
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(f"{run_id}.")
    ]


def test_two_runs_of_one_name_side_by_side_then_resume_keeps_lineage(ray_cluster, tmp_path):
    marker = tmp_path / "crashed"
    crashing = [  # run 1's collector dies once: Ray restarts it inside the run's bundle
        "collector.env_id=tests.test_collector_group:crashing_cartpole",
        f"collector.env_kwargs={{marker: '{marker}', crash_at: 300}}",
    ]
    spec = model_spec_for(load_config(overrides=TINY))  # CartPole's: the factory wraps it
    controllers = [
        Controller(
            load_config(
                overrides=[*TINY, "controller.total_frames=2000", f"seed={i}", *crashing[: 2 * i]]
            ),
            model_spec=spec,
            checkpoint_root=tmp_path / f"run{i}",
        )
        for i in range(2)
    ]
    ids = [c.run_id for c in controllers]
    assert ids[0] != ids[1] and all(i.startswith("shared-") for i in ids)
    for controller in controllers:
        controller.setup()
    for run_id in ids:  # operators find each run's actors by its id
        assert sorted(named_actors_of(run_id)) == [
            f"{run_id}.collector-0",
            f"{run_id}.learner-0",
            f"{run_id}.replay-0",
        ]
        ray.get_actor(f"{run_id}.collector-0", namespace="relayrl")
    summaries = [None, None]

    def train(i):
        summaries[i] = controllers[i].run()

    threads = [threading.Thread(target=train, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    for i, summary in enumerate(summaries):
        assert summary is not None and summary["run_id"] == ids[i]
        assert summary["frames"] >= 2000 and summary["optim_steps"] > 0
        _, manifest = latest_valid(tmp_path / f"run{i}")
        assert manifest["counters"]["collected_frames"] == summary["frames"]
        assert not named_actors_of(ids[i])  # shut down with its run
        table = placement_group_table().values()
        groups = [g for g in table if g["name"] == f"{ids[i]}.services"]
        assert [g["state"] for g in groups] == ["REMOVED"]  # released with its run
    assert marker.exists() and summaries[1]["collector_failures"] >= 1
    assert summaries[0]["collector_failures"] == 0  # the other run never noticed

    resumed = Controller(
        load_config(overrides=[*TINY, "controller.total_frames=3000", "seed=0"]),
        checkpoint_root=tmp_path / "resumed",
        resume_from=tmp_path / "run0",
    )
    summary = resumed.run()
    assert summary["run_id"] not in ids and summary["lineage"] == [ids[0]]
    assert summary["frames"] >= 3000
    _, manifest = latest_valid(tmp_path / "resumed")
    assert manifest["counters"]["collected_frames"] == summary["frames"]


def test_a_run_larger_than_the_cluster_fails_naming_resources(ray_cluster):
    config = load_config(
        overrides=[
            *TINY,
            "collector.num_collectors=2",
            "collector.num_cpus=5",  # 10 CPUs for collectors; the test cluster has 8
            # The reservation can never be placed: the wait is idle time, 1 s of it is enough.
            "learner.setup_timeout_s=1",
        ]
    )
    controller = Controller(config)
    started = time.monotonic()
    with pytest.raises(PlacementError) as caught:
        controller.run()
    assert time.monotonic() - started < 1 + 10
    message = str(caught.value)
    assert controller.run_id in message and "learner.setup_timeout_s" in message
    assert "2 collectors x {CPU: 5}" in message and "total {CPU: 11.25}" in message
    assert "the cluster has total {CPU: 8" in message
    table = placement_group_table().values()
    groups = [g for g in table if g["name"].startswith(controller.run_id)]
    assert groups and all(g["state"] == "REMOVED" for g in groups)
    assert not named_actors_of(controller.run_id)  # nothing was started
