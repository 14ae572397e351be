"""The collector's pure parts, no Ray: weights, write routing, pause, state, bench ratios."""

import threading
import types

import pytest
import torch

from collector.control import STATE_FORMAT, PauseBarrier, check_state
from collector.delivery import failover_shards, new_writer_id
from collector.rig import bracket_ratios
from collector.weights import PolicyWeights


def label(generation, version):
    return types.SimpleNamespace(generation=generation, version=version)


def test_weights_load_only_when_newer_by_generation_then_version():
    weights = PolicyWeights(torch.nn.Linear(2, 1))
    assert weights.label == (-1, -1)
    published = torch.nn.Linear(2, 1).state_dict()
    assert weights.apply(label(1, 0), published)
    assert torch.equal(weights.network.weight, published["weight"])
    stale = {k: torch.zeros_like(v) for k, v in published.items()}
    for older in (label(1, 0), label(0, 99)):  # the same label, an older generation
        assert not weights.is_newer(older)
        assert not weights.apply(older, stale)
    assert torch.equal(weights.network.weight, published["weight"])
    assert weights.label == (1, 0)
    assert weights.apply(label(1, 1), stale)
    assert weights.label == (1, 1) and not weights.network.weight.any()


def test_a_failed_write_visits_every_other_shard_once_starting_after_home():
    assert failover_shards(1, 3) == [2, 0]
    assert failover_shards(0, 1) == []
    for home in range(5):
        order = failover_shards(home, 5)
        assert sorted(order) == sorted(set(range(5)) - {home})
        assert order[0] == (home + 1) % 5


def test_writer_ids_name_the_collector_and_differ_per_incarnation():
    first, second = new_writer_id(3), new_writer_id(3)
    assert first.startswith("collector-3/") and second.startswith("collector-3/")
    assert first != second


def test_pause_waits_for_running_rollouts_and_holds_new_ones_until_resume():
    barrier = PauseBarrier()
    barrier.enter()
    assert not barrier.pause(timeout=0.0)  # still paused after the timeout
    idle = barrier.idle("collector 0")
    with pytest.raises(RuntimeError, match="collector 0: pause before loading state"), idle:
        pass
    paused = threading.Event()
    pauser = threading.Thread(target=lambda: barrier.pause() and paused.set())
    pauser.start()
    barrier.leave()  # the last running rollout ends: the pause returns
    pauser.join(timeout=10)
    assert paused.is_set()
    with barrier.idle("collector 0"):
        pass
    entered = threading.Event()
    rollout = threading.Thread(target=lambda: (barrier.enter(), entered.set()))
    rollout.start()
    assert not entered.wait(timeout=0.05)  # held while paused
    barrier.resume()
    assert entered.wait(timeout=10)
    rollout.join(timeout=10)
    assert not barrier.pause(timeout=0.0)  # the released rollout runs
    barrier.leave()
    assert barrier.pause(timeout=0.0)


def test_state_is_checked_against_the_loading_collector_and_upgraded():
    state = {"format": STATE_FORMAT, "collector_id": 1, "num_envs": 4, "transitions": "nstep-3"}
    assert check_state(state, collector_id=1, num_envs=4, transitions="nstep-3") is state
    with pytest.raises(ValueError, match="num_envs: state has 4, collector has 8"):
        check_state(state, collector_id=1, num_envs=8)
    with pytest.raises(ValueError, match="format: state has 9"):
        check_state({**state, "format": 9})
    old = {"format": 1, "collector_id": 1, "num_envs": 4, "n_step": 3}
    upgraded = check_state(old, collector_id=1, num_envs=4, transitions="nstep-3")
    assert upgraded["format"] == STATE_FORMAT and upgraded["transitions"] == "nstep-3"


def test_bench_ratios_set_each_collector_window_against_its_raw_bracket():
    assert bracket_ratios([100.0, 80.0, 90.0], [81.0, 68.0]) == pytest.approx([0.9, 0.8])
    with pytest.raises(ValueError):  # every collector window lies between two raw windows
        bracket_ratios([100.0, 80.0], [81.0, 68.0])
