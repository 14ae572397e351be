"""Collector actors on a local Ray: weights, pause barrier, state, restarts, accounting."""

import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch

from collector.manage.group import CollectorGroup, CollectorsPausedError
from collector.manage.hub import RolloutLostError
from collector.networks.q_mlp import ModelSpec
from learner.receipts import PublishedWeights
from replay.shard import remote_shard

SPEC = ModelSpec(4, 2, (16,))


def publish(generation, version, fill):
    state = {k: torch.full_like(v, fill) for k, v in SPEC.build().state_dict().items()}
    return PublishedWeights(generation, version, ray.put(state))


def crashing_cartpole(marker: str, crash_at: int) -> gym.Env:
    """CartPole whose process dies at its ``crash_at``-th step, once per ``marker`` file."""
    return CrashOnce(gym.make("CartPole-v1"), Path(marker), crash_at)


class CrashOnce(gym.Wrapper):
    def __init__(self, env, marker, crash_at):
        super().__init__(env)
        self.marker, self.crash_at, self.steps = marker, crash_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.crash_at and not self.marker.exists():
            self.marker.touch()
            os._exit(1)  # the collector process dies mid-rollout
        return self.env.step(action)


def make_group(name, count, env_id="CartPole-v1", num_shards=None, **kwargs):
    """``count`` collectors writing to ``num_shards`` shards (as many as collectors by default)."""
    num_shards = count if num_shards is None else num_shards
    shards = [remote_shard(name, i, 50_000, num_cpus=0) for i in range(num_shards)]
    group = CollectorGroup(name, count, env_id, 4, SPEC, shards, 1, num_cpus=0, **kwargs)
    group.wait_ready()
    return group, shards


def shutdown(group, shards):
    group.shutdown()
    for shard in shards:
        ray.kill(shard, no_restart=True)


def write_counts(shards):
    return [s["write_count"] for s in ray.get([s.stats.remote() for s in shards])]


@pytest.fixture(scope="module")
def pair(ray_cluster):
    """Two collectors (4 envs, 3-step transitions) writing to two shards, shared by tests."""
    group, shards = make_group("pair", 2, n_step=3, gamma=0.9)
    yield group, shards
    shutdown(group, shards)


def test_weights_older_than_the_collectors_are_ignored(pair):
    group, _ = pair
    actor = group.actors[1]
    assert ray.get(actor.set_weights.remote(publish(0, 5, 0.5)))
    assert not ray.get(actor.set_weights.remote(publish(0, 3, -1.0)))
    assert not ray.get(actor.set_weights.remote(publish(0, 5, -1.0)))
    # A rollout handed older weights keeps using (and reporting) the newer ones.
    receipt = ray.get(actor.rollout.remote(64, 0.0, publish(0, 4, -1.0)))
    assert (receipt.policy_generation, receipt.policy_version) == (0, 5)
    # A new learner generation outranks any version of the previous one.
    receipt = ray.get(actor.rollout.remote(64, 0.0, publish(1, 0, 0.25)))
    assert (receipt.policy_generation, receipt.policy_version) == (1, 0)
    assert group.policy_versions()[1] == (1, 0)
    # The rollout's work (weights applied, stepping, write sent) holds its stepping.
    assert receipt.work_s >= receipt.rollout_s > 0


def test_pause_waits_for_rollouts_and_freezes_writes_until_resume(pair):
    group, shards = pair
    before = sum(write_counts(shards))
    refs = [group.rollout(i % 2, 512, 0.5) for i in range(4)]
    group.pause()
    try:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        assert len(ready) == len(refs)  # no rollout in flight
        assert group.inflight() == 0
        receipts = ray.get(refs)
        counts = write_counts(shards)
        written = sum(r.frames for r in receipts)
        assert sum(counts) == before + written and written > 0  # every write acknowledged
        with pytest.raises(CollectorsPausedError):
            group.rollout(0, 64, 0.5)
        # A rollout sent to a paused actor directly waits for resume instead of writing.
        direct = group.actors[1].rollout.remote(64, 0.5)
        ray.get([a.ping.remote() for a in group.actors])
        ready, _ = ray.wait([direct], timeout=1.0)
        assert not ready
        assert write_counts(shards) == counts
    finally:
        group.resume()
    late = ray.get(direct)
    after = ray.get(group.rollout(0, 64, 0.5))
    last_seq = {
        r.collector_id: max(x.seq for x in receipts if x.collector_id == r.collector_id)
        for r in receipts
    }
    # Sequence numbers continue exactly where they stopped.
    assert (late.seq, after.seq) == (last_seq[1] + 1, last_seq[0] + 1)
    assert sum(write_counts(shards)) == sum(counts) + late.frames + after.frames


def test_state_dict_round_trip_restarts_fresh_episodes(pair):
    group, _ = pair
    ray.get(group.rollout(0, 256, 1.0))
    group.pause()
    state = group.state_dicts()
    group.resume()
    plain = {k: v for k, v in state[0].items() if not isinstance(v, np.ndarray)}
    json.dumps(plain)  # counters and the exploration RNG are JSON-able
    assert state[0]["seq"] >= 1 and state[0]["frames"] > 0 and state[0]["transitions"] == "nstep-3"
    ray.get(group.rollout(0, 256, 1.0))
    replays = []
    for _ in range(2):
        group.load_state_dicts(state)
        replays.append(ray.get(group.rollout(0, 512, 1.0)))
    first, second = replays
    assert first.seq == second.seq == state[0]["seq"]  # counters restored
    # Each restore writes under a new writer id: restored sequence numbers are not retries.
    assert first.writes[0].writer_id != second.writes[0].writer_id
    assert not first.writes[0].duplicate and not second.writes[0].duplicate
    # Same RNG state and the same re-seeded fresh episodes: the same rollout.
    assert first.episode_lengths == second.episode_lengths and first.episode_lengths
    assert first.frames == second.frames
    # Open n-step windows are dropped on restore: at most 128 steps * 4 envs, less the 2 steps
    # per env whose windows are still open.
    assert first.frames <= (128 - 2) * 4
    with pytest.raises(ValueError, match="collector_id"):
        group.load_state_dicts([state[1], state[0]])


def test_killed_collector_restarts_with_weights_and_exact_accounting(ray_cluster, tmp_path):
    marker = tmp_path / "crashed"
    group, shards = make_group(
        "restart",
        1,
        env_id="tests.test_collector_group:crashing_cartpole",
        env_kwargs={"marker": str(marker), "crash_at": 100},
        max_restarts=2,
    )
    weights = publish(0, 7, 0.1)
    counted = []
    frames = failures = 0
    try:
        inflight = [group.rollout(0, 64, 0.5, weights) for _ in range(2)]
        while len(counted) < 12:
            ref = inflight.pop(0)
            try:
                receipt = ray.get(ref)
            except ray.exceptions.RayActorError:
                failures += 1
                group.mark_dead(0, ref)
            else:
                counted.append(receipt)
                frames += receipt.frames
            inflight.append(group.rollout(0, 64, 0.5, weights))
        group.pause()
        for receipt in ray.get(inflight):
            counted.append(receipt)
            frames += receipt.frames
        (stored,) = write_counts(shards)
        versions = group.policy_versions()
    finally:
        shutdown(group, shards)
    assert marker.exists() and failures >= 1
    assert group.restarts == 1  # both rollouts lost to the one death count one restart
    writers = [r.writes[0].writer_id for r in counted]
    assert len(set(writers)) == 2  # a second incarnation wrote after the restart
    restarted = [r for r in counted if r.writes[0].writer_id == writers[-1]]
    seqs = [r.seq for r in restarted]
    assert len(set(seqs)) == len(seqs)
    assert min(seqs) < failures  # the new incarnation numbers its writes from 0 again
    assert all(r.policy_version == 7 for r in restarted)  # weights re-sent after the restart
    assert versions == [(0, 7)]
    assert frames == sum(r.frames for r in counted)
    assert frames == sum(r.writes[0].num_items for r in counted)
    # A lost rollout may have stored its write without being counted; nothing else differs.
    assert frames <= stored <= frames + failures * 64


def test_rollouts_through_a_hub_and_a_lost_hub_loses_only_its_rollouts(ray_cluster):
    # Two collectors through the one hub; one shard stores for both (each shard is a process).
    group, shards = make_group("hubbed", 2, num_shards=1, aggregate=True)
    weights = publish(0, 3, 0.2)
    try:
        assert len(group.hubs) == 1  # one node, one hub
        tickets = {group.rollout(i, 32, 0.5, weights): i for i in (0, 1, 0)}
        finished = []
        while len(finished) < 3:
            finished += group.completed(timeout=60)
        assert {f.ticket for f in finished} == set(tickets)
        outcomes = [(f.error, f.receipt and f.receipt.policy_version) for f in finished]
        assert all(f.ok for f in finished), outcomes
        # Each collector acted with the weights sent along. (A collector runs two rollout
        # calls at once, so its weightless second call may reach the stepper first, on older
        # weights: its receipt then says so.)
        versions = {i: set() for i in (0, 1)}
        for f in finished:
            versions[f.receipt.collector_id].add(f.receipt.policy_version)
        assert 3 in versions[0] and versions[1] == {3}, outcomes
        assert {f.receipt.collector_id for f in finished} == {0, 1}
        # Collectors hold their rollouts while the hub dies: each comes back lost, once.
        ray.get([actor.pause.remote() for actor in group.actors])
        held = [group.rollout(i, 32, 0.5) for i in (0, 1)]
        group.flush()
        ray.get(group.hubs[0].ping.remote())  # the hub has taken the orders
        ray.kill(group.hubs[0], no_restart=False)
        lost = []
        while len(lost) < 2:
            lost += group.completed(timeout=60)
        assert sorted(f.ticket for f in lost) == sorted(held)
        assert all(isinstance(f.error, RolloutLostError) for f in lost)
        assert group.inflight() == 0
        ray.get([actor.resume.remote() for actor in group.actors])
        again = group.rollout(1, 32, 0.5)  # through the restarted hub
        back = []
        while not back:
            back = group.completed(timeout=60)
        assert [f.ticket for f in back] == [again] and back[0].ok
        assert back[0].receipt.policy_version == 3  # its weights re-sent after the loss
    finally:
        shutdown(group, shards)
