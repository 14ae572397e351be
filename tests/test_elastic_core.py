"""The pure parts of elastic runs: sizes, the auto fleet's size, slots, resize records (no Ray)."""

from __future__ import annotations

import json

import pytest

from collector.envs.vector import env_seeds
from services.config import ConfigError, load_config
from services.driver.autoscale import offered
from services.driver.elastic import Sizes, sized_config
from services.driver.inflight import InFlight
from services.observe.runlog import read_events, read_log
from services.plot import plot_run


def test_sized_config_validates_the_new_sizes_and_names_the_field():
    config = load_config(overrides=["learner.global_batch_size=32"])
    resized = sized_config(config, Sizes(5, 3, 2))
    assert (resized.collector.num_collectors, resized.replay.num_shards) == (5, 3)
    assert resized.learner.world_size == 2 and resized.learner.per_rank_batch_size == 16
    with pytest.raises(ConfigError, match="learner.global_batch_size"):
        sized_config(config, Sizes(2, 2, 3))  # 32 is not divisible by 3 ranks
    with pytest.raises(ConfigError, match="replay.num_shards"):
        sized_config(config, Sizes(2, 0, 1))


def test_auto_fleet_takes_the_cpus_left_by_shards_and_ranks_within_its_bounds():
    config = load_config(
        overrides=[
            "collector.num_collectors=auto",
            "collector.num_cpus=0.5",
            "collector.min_collectors=2",
            "collector.max_collectors=10",
            "replay.num_shards=2",
            "replay.num_cpus=0.5",
        ]
    )
    assert config.collector.auto and config.collector.fleet_size == 2
    assert offered(config, 4.0) == 4  # (4 - 1 - 1) / 0.5
    assert offered(config, 1.0) == 2  # never below min_collectors
    assert offered(config, 64.0) == 10  # never above max_collectors
    with pytest.raises(ConfigError, match="collector.num_collectors"):
        load_config(overrides=["collector.num_collectors=many"])
    with pytest.raises(ConfigError, match="collector.max_collectors"):
        load_config(overrides=["collector.min_collectors=3", "collector.max_collectors=2"])


def test_collectors_joining_get_turns_and_leaving_ones_get_none():
    inflight = InFlight(num_collectors=2, slots=1)
    assert [inflight.next_free(), inflight.next_free(), inflight.next_free()] == [0, 1, None]
    inflight.add("a", 0)
    inflight.add("b", 1)
    inflight.grow(2)  # a collector joined
    assert inflight.next_free() == 2
    inflight.retire(1)  # collector 1 leaves: its rollout in flight still finishes
    assert inflight.pop("b") == 1 and inflight.per_collector[1] == 0
    assert inflight.next_free() is None  # no turn for collector 1 any more
    inflight.pop("a")
    assert inflight.next_free() == 0


def test_collectors_of_another_generation_never_share_env_streams():
    first = {tuple(env_seeds(0, i, 4)) for i in range(3)}
    later = {tuple(env_seeds(0, i, 4, generation=g)) for i in range(3) for g in (1, 2)}
    assert len(first | later) == 9  # every (index, generation) its own streams


def test_resize_records_are_events_marked_on_the_plot_not_progress_points(tmp_path):
    progress = {"frames": 100, "elapsed_s": 1.0, "episode_return_mean": 10.0, "learner": {}}
    progress |= {"frames_per_s": 50.0, "updates_per_s": 5.0}
    event = {"event": "resize", "what": "collectors", "from": 1, "to": 3, "frames": 150}
    later = {**progress, "frames": 200, "episode_return_mean": 20.0}
    lines = [json.dumps(r) for r in (progress, event, later)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert [r["frames"] for r in read_log(tmp_path)] == [100, 200]
    assert [e["to"] for e in read_events(tmp_path, "resize")] == [3]
    assert plot_run(tmp_path).stat().st_size > 0
