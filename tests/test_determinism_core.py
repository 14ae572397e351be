"""Deterministic mode's pure parts: its config refusals and the derived random streams."""

from __future__ import annotations

import numpy as np
import pytest

from replay.sampling.streams import COMPONENTS, stream_generator, stream_seed, stream_seeds
from services.config import ConfigError, config_from_dict

DET = ["run.deterministic=true", "checkpoint.interval_s=0"]


def test_the_mode_alone_is_enough_and_a_set_field_it_cannot_honour_is_refused():
    config = config_from_dict({}, ["run.deterministic=true"])
    assert config.run.deterministic and config.checkpoint.interval_s == 0
    assert config_from_dict({}).checkpoint.interval_s > 0  # the default mode keeps its own
    with pytest.raises(ConfigError, match=r"checkpoint\.interval_s"):
        config_from_dict({"checkpoint": {"interval_s": 30}}, ["run.deterministic=true"])


def test_deterministic_is_off_by_default_and_accepted_when_clean():
    assert config_from_dict({}).run.deterministic is False
    config = config_from_dict({}, [*DET, "run.policy_lag=3"])
    assert config.run.deterministic is True
    assert config.run.policy_lag == 3


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("grpc.port=0", "grpc.port"),
        ("controller.early_stop_metric=episode_return_mean", "controller.early_stop_metric"),
        ("controller.stop_return=100", "controller.stop_return"),
        ("learner.compile=default", "learner.compile"),
    ],
)
def test_deterministic_refusals_name_the_field(override, field):
    config_from_dict({}, [override])  # fine in the default mode
    with pytest.raises(ConfigError, match=rf"^{field}: .*deterministic"):
        config_from_dict({}, [*DET, override])


def test_time_based_checkpoints_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"^checkpoint\.interval_s: .*frame counts"):
        config_from_dict({}, ["run.deterministic=true", "checkpoint.interval_s=30"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("run.policy_lag=0", r"^run\.policy_lag: must be >= 1"),
        ("run.deterministic=maybe", r"^run\.deterministic: must be true or false"),
    ],
)
def test_run_section_values_are_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({}, [override])


def test_streams_depend_on_every_part_of_their_name_and_nothing_else():
    base = stream_generator(3, "replay", 1, 2, key=(0, 5)).integers(0, 2**62, 8)
    again = stream_generator(3, "replay", 1, 2, key=(0, 5)).integers(0, 2**62, 8)
    assert np.array_equal(base, again)
    others = [
        stream_generator(4, "replay", 1, 2, key=(0, 5)),
        stream_generator(3, "shuffle", 1, 2, key=(0, 5)),
        stream_generator(3, "replay", 0, 2, key=(0, 5)),
        stream_generator(3, "replay", 1, 3, key=(0, 5)),
        stream_generator(3, "replay", 1, 2, key=(1, 5)),
        stream_generator(3, "replay", 1, 2, key=(0, 6)),
    ]
    for other in others:
        assert not np.array_equal(base, other.integers(0, 2**62, 8))


def test_stream_seeds_are_stable_known_values():
    # Pinned: a stream's values must not change between releases (runs compare across them).
    assert stream_seeds(0, "env", 0, 3) == [3964924996, 1358922860, 3894904162]
    assert stream_seed(0, "init", 0, 0) == 346450731591535396
    assert len(set(stream_seeds(0, "env", 0, 64))) == 64
    seed = stream_seed(0, "init", 0, 0)
    assert 0 <= seed < 2**63
    assert seed != stream_seed(0, "init", 0, 1)
    assert sorted(COMPONENTS.values()) == list(range(1, len(COMPONENTS) + 1))


def test_streams_refuse_unknown_components_and_negative_numbers():
    with pytest.raises(ValueError, match="component"):
        stream_seed(0, "nope", 0)
    with pytest.raises(ValueError, match=">= 0"):
        stream_seed(0, "env", -1)


# -- replay staging and digests -------------------------------------------------------------
def _write(staging, table, writer, seq, value, n=2):
    return staging.write(table, {"x": np.full((n, 1), float(value), np.float32)}, writer, seq)


def test_staged_writes_commit_in_collector_order_whatever_the_arrival():
    from replay.digest import table_digest
    from replay.staging import Staging
    from replay.table import ReplayTable

    arrivals = [
        [("collector-1/a", 0, 1.0), ("collector-0/b", 0, 0.0), ("collector-0/b", 1, 2.0)],
        [("collector-0/x", 1, 2.0), ("collector-1/y", 0, 1.0), ("collector-0/x", 0, 0.0)],
    ]
    digests, contents = [], []
    for order in arrivals:
        table, staging = ReplayTable(16, sampler="prioritized", seed=0), Staging()
        for writer, seq, value in order:
            receipt = _write(staging, table, writer, seq, value)
            assert receipt.indices.tolist() == [-1, -1] and not receipt.duplicate
        assert len(table) == 0  # nothing is visible before the commit
        assert staging.commit(table) == {"writes": 3, "items": 6, "updates": 0}
        contents.append(table.storage.gather(np.arange(6))["x"].ravel().tolist())
        digests.append(table_digest(table))
    assert contents[0] == contents[1] == [0.0, 0.0, 2.0, 2.0, 1.0, 1.0]
    assert digests[0] == digests[1]


def test_staged_retries_are_stored_once_and_bad_schemas_refused_at_once():
    from replay.staging import Staging
    from replay.storage import SchemaError
    from replay.table import ReplayTable

    table, staging = ReplayTable(8), Staging()
    _write(staging, table, "collector-0/a", 0, 1.0)
    assert _write(staging, table, "collector-0/a", 0, 1.0).duplicate
    staging.commit(table)
    assert _write(staging, table, "collector-0/a", 0, 1.0).duplicate  # already in the table
    with pytest.raises(SchemaError):
        staging.write(table, {"y": np.zeros((2, 1), np.float32)}, "collector-0/a", 1)
    assert len(staging) == 0 and len(table) == 2


def test_staged_priority_updates_take_the_largest_in_any_order():
    from replay.staging import Staging
    from replay.table import ReplayTable

    results = []
    for updates in ([0.5, 3.0], [3.0, 0.5]):
        table, staging = ReplayTable(8, sampler="prioritized", seed=0), Staging()
        _write(staging, table, "collector-0/a", 0, 1.0, n=4)
        staging.commit(table)
        for priority in updates:  # two ranks drew slot 1
            staging.update([1], table.insertion_ids[[1]], [priority])
        assert staging.commit(table)["updates"] == 2
        results.append(table.sampler.tree.leaves(4).tolist())
    assert results[0] == results[1]
    assert results[0][1] == pytest.approx(3.0**0.6)


def test_table_digest_sees_contents_and_priorities():
    from replay.digest import table_digest
    from replay.table import ReplayTable

    table = ReplayTable(8, sampler="prioritized", seed=0)
    table.write({"x": np.ones((3, 1), np.float32)}, "w", 0)
    before = table_digest(table)
    table.update_priorities([0], table.insertion_ids[[0]], [2.0])
    assert table_digest(table) != before


def test_learner_state_digest_sees_parameters_and_optimizer_state():
    import torch

    from learner.determinism import state_digest

    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(net.parameters())

    def digest():
        return state_digest({"loss": net.state_dict(), "stepper": opt.state_dict(), "version": 0})

    before = digest()
    net(torch.ones(1, 2)).sum().backward()
    opt.step()
    after = digest()
    assert after != before
    assert after == digest()


# -- the deterministic loop's fault watch ----------------------------------------------------
class _Receipt:
    def __init__(self, collector_id, seq):
        self.collector_id, self.seq = collector_id, seq


def test_receipts_catch_a_collector_whose_sequence_numbers_broke():
    from services.driver.loops.deterministic import Receipts

    watch = Receipts()
    for seq in (0, 1, 2):
        watch(None, _Receipt(0, seq))
        watch(None, _Receipt(1, seq))
    assert watch.restarted == set() and watch.counted == {0, 1}
    watch(None, _Receipt(1, 0))  # Ray restarted collector 1 between two ticks
    assert watch.restarted == {1}


def rng_state(seed):
    return np.random.default_rng(seed).bit_generator.state


def test_a_deterministic_shard_draws_each_named_request_alike_in_any_order():
    from replay.shard import ReplayShard

    shards = [
        ReplayShard(0, 64, "prioritized", seed=s, deterministic=True, run_seed=5) for s in (1, 2)
    ]
    for shard in shards:
        shard.write({"x": np.arange(32, dtype=np.float32)[:, None]}, "collector-0/a", 0)
        assert shard.info()["size"] == 0  # staged until the commit
        assert shard.commit()["items"] == 32
    first = [shards[0].sample(8, stream=key)[0]["index"] for key in [(0, 7, 0), (1, 7, 0)]]
    second = [shards[1].sample(8, stream=key)[0]["index"] for key in [(1, 7, 0), (0, 7, 0)]]
    assert np.array_equal(first[0], second[1]) and np.array_equal(first[1], second[0])
    assert not np.array_equal(first[0], first[1])
    for seed, shard in zip((1, 2), shards, strict=True):  # the shards' own generators drew nothing
        assert shard.table.sampler.rng.bit_generator.state == rng_state(seed)


def test_dead_frame_draws_wait_for_the_commit_so_request_order_does_not_matter():
    from replay.shard import ReplayShard
    from tests.test_atari_replay import frame_write

    shards = [
        ReplayShard(0, 8, "prioritized", frame_stack=2, deterministic=True, run_seed=3)
        for _ in range(2)
    ]
    for shard in shards:
        for seq in range(4):  # each write overwrites most of the frame ring: items 0-2 die
            shard.write(frame_write(10 * seq, 1, 6), "collector-0/a", seq)
        shard.commit()
    keys = [(0, 1, 0), (1, 1, 0)]
    first = [shards[0].sample(16, stream=key)[0]["index"].tolist() for key in keys]
    second = [shards[1].sample(16, stream=key)[0]["index"].tolist() for key in reversed(keys)]
    assert first == second[::-1]
    assert set(first[0]) == {3}
    leaves = [shard.table.sampler.tree.leaves(4) for shard in shards]
    assert leaves[0][0] == leaves[0][3]  # the dead draws are staged, not applied yet
    for shard in shards:
        shard.commit()
    leaves = [shard.table.sampler.tree.leaves(4) for shard in shards]
    assert np.array_equal(leaves[0], leaves[1])
    assert leaves[0][3] > leaves[0][:3].max()  # dead items drawn now have the least priority
