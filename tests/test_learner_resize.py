"""Learner state restored into another world size: the pure conversion, then DDP groups on Ray."""

import dataclasses
import io

import numpy as np
import pytest
import ray
import torch

from collector.networks.q_mlp import ModelSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.gpu.check import arrays as random_arrays
from learner.ranks.resize import rank_stream_seed, states_for_world_size
from replay.sampling.streams import stream_seed

SPEC = ModelSpec(4, 2, (16, 16))
CONFIG = LearnerConfig(
    global_batch_size=24,  # divisible by 1, 2 and 3 ranks
    lr=1e-2,
    target_update_interval=2,
    lr_scheduler="linear",
    lr_decay_steps=100,
)


def assert_same(a, b):
    """Equal nested dicts/lists of tensors and plain values, bit for bit."""
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def trained_states(world_size=2, *, cuda=False):
    """A DDP-like state set: one trained replica, per-rank RNG and meta."""
    torch.manual_seed(0)
    core = LearnerCore(SPEC, CONFIG)
    core.train([core.to_batch(random_arrays(24, s)) for s in range(3)])
    states = []
    for rank in range(world_size):
        state = core.state_dict()
        state["rng"]["torch"] = torch.Generator().manual_seed(rank).get_state()
        if cuda:
            state["rng"]["cuda"] = torch.tensor([rank, 7], dtype=torch.int64).view(torch.uint8)
        state["rng"]["replay"] = np.random.default_rng(rank).bit_generator.state
        state["meta"] = {
            "rank": rank,
            "world_size": world_size,
            "generation": 0,
            "loss": "dqn",
            "stepper": "default",
        }
        states.append(state)
    return states


def test_conversion_keeps_the_replica_and_gives_each_rank_and_generation_its_own_streams():
    source = trained_states(2, cuda=True)
    before = io.BytesIO()
    torch.save(source, before)
    converted = states_for_world_size(source, 3, seed=5, generation=1)

    assert [(s["meta"]["rank"], s["meta"]["world_size"]) for s in converted] == [
        (0, 3),
        (1, 3),
        (2, 3),
    ]
    for state in converted:
        assert state["meta"]["resized_from"] == {"world_size": 2, "generation": 0}
        assert state["meta"]["loss"] == "dqn" and state["version"] == 3
        assert_same(state["loss"], source[0]["loss"])  # policy and target network
        assert_same(state["stepper"], source[0]["stepper"])  # optimizer and scheduler
        assert state["stepper"]["optimizer"]["state"]  # Adam moments are there to compare
    # The input is left as it was (bit for bit, RNG and meta included).
    before.seek(0)
    assert_same(torch.load(before, weights_only=True), source)

    # Every stream differs between ranks, and from the source's and a later generation's.
    later = states_for_world_size(source, 3, seed=5, generation=2)
    for part in ("torch", "cuda"):
        seen = [s["rng"][part] for s in converted + later + source]
        assert len({bytes(t.numpy()) for t in seen}) == len(seen), part
    replay = [s["rng"]["replay"]["state"]["state"] for s in converted + later + source]
    assert len(set(replay)) == len(replay)
    # The same seed and generation give the same streams (a retried restore draws alike).
    again = states_for_world_size(source, 3, seed=5, generation=1)
    assert_same([s["rng"] for s in again], [s["rng"] for s in converted])
    # CUDA: a Philox state (seed, offset 0) of the derived seed.
    seed, offset = converted[1]["rng"]["cuda"].view(torch.int64).tolist()
    assert (seed, offset) == (rank_stream_seed(5, 1, 1, "cuda"), 0)
    # Not the streams a rank seeds itself with at join (deterministic or not).
    assert rank_stream_seed(5, 0, 1, "torch") not in (
        stream_seed(5, "shuffle", 1),
        stream_seed(5, "shuffle", 1, key=(1,)),
    )


def test_converted_states_load_into_a_core_and_torch_save_round_trips():
    converted = states_for_world_size(trained_states(2), 1, seed=0, generation=3)
    assert converted[0]["rng"]["cuda"].shape == (16,)  # for GPU ranks, from CPU-saved states
    buffer = io.BytesIO()
    torch.save(converted, buffer)  # weights_only-safe: tensors and plain values
    buffer.seek(0)
    (state,) = torch.load(buffer, weights_only=True)
    core = LearnerCore(SPEC, CONFIG)
    core.load_state_dict(state)
    assert core.version == 3
    assert_same(core.state_dict()["stepper"], state["stepper"])
    assert torch.equal(torch.get_rng_state(), state["rng"]["torch"])
    generator = np.random.default_rng()
    generator.bit_generator.state = state["rng"]["replay"]
    core.train([core.to_batch(random_arrays(24, 9))])
    assert core.version == 4


def test_same_world_size_passes_through_and_bad_sets_are_refused():
    source = trained_states(2)
    same = states_for_world_size(source, 2, seed=1, generation=5)
    assert_same(same, source)  # each rank continues its own streams
    assert all(a is not b for a, b in zip(same, source, strict=True))

    skewed = [source[0], {**source[1], "version": 4}]
    with pytest.raises(ValueError, match=r"disagree on the model version: \[3, 4\]"):
        states_for_world_size(skewed, 3, seed=0, generation=1)
    with pytest.raises(ValueError, match="cannot be restored into world_size 1"):
        states_for_world_size([source[0], source[0]], 1, seed=0, generation=1)  # rank 1 missing
    with pytest.raises(ValueError, match=r"ranks \[0\], world_size \[2\]"):
        states_for_world_size(source[:1], 2, seed=0, generation=1)
    with pytest.raises(ValueError, match="world_size: must be >= 1"):
        states_for_world_size(source, 0, seed=0, generation=1)


# -- DDP groups on a local Ray --------------------------------------------------------------


@pytest.fixture(scope="module")
def shards(ray_cluster):
    from replay.shard import remote_shard

    handles = [remote_shard("resize", i, 1000, seed=i) for i in range(2)]
    ray.get([s.write.remote(random_arrays(200, i), "writer", 0) for i, s in enumerate(handles)])
    yield handles
    for handle in handles:
        ray.kill(handle)


def group_of(name, world_size, shards, generation):
    from learner.ranks.group import LearnerGroup

    config = dataclasses.replace(CONFIG, world_size=world_size)
    return LearnerGroup(name, config, SPEC, shards, seed=11, generation=generation)


def assert_restored(group, states):
    """Every rank holds the source replica: parameters, targets, stepper, version."""
    world_size = group.config.world_size
    source = states[0]
    for rank in range(world_size):
        assert_same(group.parameters(rank), group.parameters(0))
    restored = group.state_dicts()
    for rank, state in enumerate(restored):
        assert state["meta"]["rank"] == rank and state["meta"]["world_size"] == world_size
        assert state["version"] == source["version"]
        assert_same(state["loss"], source["loss"])
        assert_same(state["stepper"], source["stepper"])
    return restored


def test_two_ranks_restore_into_one_and_three_and_one_into_two(shards):
    two = group_of("resize-2", 2, shards, generation=0)
    try:
        two.step(3)
        states = two.state_dicts()
        one = group_of("resize-1", 1, shards, generation=1)
        try:
            assert one.load_state_dicts(states) == 3
            assert_same(one.parameters(0), two.parameters(0))
            assert_restored(one, states)
            assert one.step(2).model_version == 5
            back = one.state_dicts()
        finally:
            one.shutdown()
        # 1 -> 2, into the live two-rank group (its generation's streams).
        assert two.load_state_dicts(back) == 5
        restored = assert_restored(two, back)
        assert not torch.equal(restored[0]["rng"]["torch"], restored[1]["rng"]["torch"])
        assert two.step(1).model_version == 6
        assert_same(two.parameters(1), two.parameters(0))
    finally:
        two.shutdown()

    three = group_of("resize-3", 3, shards, generation=1)
    try:
        assert three.load_state_dicts(states) == 3
        restored = assert_restored(three, states)
        streams = {bytes(s["rng"]["torch"].numpy()) for s in restored}
        assert len(streams) == 3
        receipt = three.step(2)
        # The global batch of 24 is re-split: 8 items per rank and step.
        assert receipt.model_version == 5 and receipt.samples == 2 * 8
        for rank in (1, 2):
            assert_same(three.parameters(rank), three.parameters(0))
        skewed = [states[0], {**states[1], "version": 2}]
        with pytest.raises(ValueError, match="disagree on the model version"):
            three.load_state_dicts(skewed)
    finally:
        three.shutdown()


def test_set_shards_switches_every_rank_to_the_new_shards(shards):
    from replay.shard import remote_shard

    fresh = remote_shard("resize-new", 0, 1000, seed=9)
    ray.get(fresh.write.remote(random_arrays(200, 9), "writer", 0))
    group = group_of("resize-shards", 2, shards, generation=0)
    try:
        group.step(2)  # prefetches the next round from the old shards
        group.set_shards([fresh])
        old = [s["sample_count"] for s in ray.get([s.stats.remote() for s in shards])]
        assert group.step(2).samples == 2 * 12  # rank 0's share
        assert [s["sample_count"] for s in ray.get([s.stats.remote() for s in shards])] == old
        assert ray.get(fresh.stats.remote())["sample_count"] >= 48
    finally:
        group.shutdown()
        ray.kill(fresh)
