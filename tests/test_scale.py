"""The driver at fleet scale: exact accounting through the simulated fleets of the scale bench.

``services.bench scale`` drives the production controller and off-policy loop with simulated
collectors (many per actor), replay shards and a learner; here at CI size, at each fleet size,
through per-node hubs and (at 10) one driver call per rollout.
"""

import argparse
import math

import pytest

from services.bench.runtime.scale import measure


def bench_args(**overrides) -> argparse.Namespace:
    defaults = {
        "rate": 4000.0,
        "inflight": 400,
        "per_node": 250,
        "rollout_frames": 64,
        "seconds": 0.5,
        "warmup": 0.3,
    }
    return argparse.Namespace(**{**defaults, **overrides})


@pytest.mark.parametrize(
    ("collectors", "aggregate"), [(10, False), (10, True), (100, True), (1000, True)]
)
def test_frames_exact_and_versions_monotone_at_every_fleet_size(ray_cluster, collectors, aggregate):
    result = measure(collectors, bench_args(), aggregate=aggregate)
    assert result["frames_exact"], result
    assert result["frames"] == result["frames_delivered"] * 1  # frame_skip 1
    assert result["versions_monotone"] and result["rounds"] > 0, result
    assert result["receipts_per_s"] > 0
    assert result["hubs"] == (math.ceil(collectors / 250) if aggregate else 0)
    # At most metrics.max_collector_series (64) per-collector series; past it one per node.
    expected = collectors if collectors <= 64 else result["hubs"]
    assert result["rollouts_series"] == expected, result
