"""Frame-deduplicated replay against real Atari envs: rebuilt stacks equal the env's own."""

import numpy as np
import pytest

from collector.envs.vector import make_vector_env
from collector.rollout import RolloutWorker
from replay.frames import FrameStackStorage, frame_capacity_for
from replay.persist.checkpoint import dump_table, load_table
from replay.storage import SchemaError
from replay.table import ReplayTable

ENV = "collector.atari:make_atari"
# Short episodes, so a few rollouts cross many episode boundaries (truncations).
ENV_KWARGS = {"game": "ALE/Pong-v5", "max_episode_steps": 23, "noop_max": 5}
NUM_ENVS, STEPS, ROLLOUTS, N_STEP = 2, 24, 6, 3


class UniformActions:
    """A collector policy drawing uniform actions from its own generator."""

    def __init__(self, seed, num_actions=6):
        self.rng = np.random.default_rng(seed)
        self.num_actions = num_actions

    def act(self, obs, explore):
        return self.rng.integers(0, self.num_actions, size=len(obs)), {}


def worker(frame_stack):
    envs = make_vector_env(ENV, NUM_ENVS, env_kwargs=ENV_KWARGS)
    return RolloutWorker(
        envs, UniformActions(7), [11, 12], n_step=N_STEP, gamma=0.9, frame_stack=frame_stack
    )


@pytest.fixture(scope="module")
def rollouts():
    """The same rollouts twice: stacked transitions, and the frame-stream writes."""
    stacked, streamed = worker(0), worker(4)
    pairs = []
    for _ in range(ROLLOUTS):
        reference = stacked.rollout(STEPS, {"random": True}, policy_version=0).transitions
        written = streamed.rollout(STEPS, {"random": True}, policy_version=0).transitions
        pairs.append((reference, written))
    stacked.envs.close()
    streamed.envs.close()
    return pairs


def fill(table, rollouts):
    """Writes every frame stream; returns the reference transitions in insertion order."""
    references = []
    for seq, (reference, written) in enumerate(rollouts):
        table.write(written, "collector-0", seq)
        references.append(reference)
    return {k: np.concatenate([r[k] for r in references]) for k in references[0]}


def test_the_rollouts_cross_episode_ends_and_short_windows(rollouts):
    reference = {k: np.concatenate([r[k] for r, _ in rollouts]) for k in rollouts[0][0]}
    assert reference["observation"].shape[1:] == (4, 84, 84)
    assert reference["truncated"].sum() >= 8  # many episode ends inside the data
    discounts = np.unique(reference["n_step_discount"].round(6))
    assert len(discounts) == N_STEP  # windows of 1, 2 and 3 steps (cut by episode ends)
    # The env's first stack of an episode repeats its reset frame.
    assert any((o[0] == o[3]).all() for o in reference["observation"])
    for reference_part, written in rollouts:
        assert "observation" not in written
        assert len(written["obs_frame"]) == len(reference_part["reward"])
        # Fewer than 2 frames per transition even with 23-step episodes (stacked pairs: 8).
        assert len(written["frames"]) < 2 * len(written["obs_frame"])


@pytest.mark.parametrize("storage", ["memory", "mmap"])
def test_rebuilt_stacks_equal_the_env_stacks_across_wraparound(rollouts, tmp_path, storage):
    capacity = 100  # smaller than the rollouts' transitions: the rings wrap around
    table = ReplayTable(
        capacity, frame_stack=4, mmap_dir=tmp_path if storage == "mmap" else None, seed=3
    )
    reference = fill(table, rollouts)
    total = len(reference["reward"])
    assert total > capacity and table.storage.frame_count > table.storage.frame_capacity
    slots = np.arange(capacity)
    stored = table.storage.gather(slots)
    # Slot s holds the newest transition k with k % capacity == s.
    newest = total - capacity + (slots - total) % capacity
    live = table.storage.live(slots)
    assert live.mean() > 0.6
    for key, value in reference.items():
        np.testing.assert_array_equal(stored[key][live], value[newest][live], err_msg=key)
    # Sampling never returns an item whose frames were overwritten; every sample is exact.
    sample = table.sample(256)
    assert table.storage.live(sample["index"]).all()
    picked = total - capacity + (sample["index"] - total) % capacity
    np.testing.assert_array_equal(sample["observation"], reference["observation"][picked])
    np.testing.assert_array_equal(sample["next_observation"], reference["next_observation"][picked])


def test_memory_per_transition_is_about_one_frame(rollouts):
    table = ReplayTable(400, frame_stack=4)
    reference = fill(table, rollouts)
    per_transition = table.storage.nbytes / len(table)
    stacked = sum(v[0].nbytes for v in reference.values())
    assert per_transition < 1.4 * 84 * 84  # frames of 7,056 bytes, plus small columns
    assert stacked > 6 * per_transition  # stacked pairs: 8 frames per transition


def test_prioritized_frame_table_checkpoint_round_trips_exactly(rollouts, tmp_path):
    table = ReplayTable(100, frame_stack=4, sampler="prioritized", seed=5)
    fill(table, rollouts)
    drawn = table.sample(32, beta=0.4)
    table.update_priorities(drawn["index"], drawn["insertion_id"], np.linspace(0.1, 3, 32))
    dump_table(table, tmp_path / "table")
    restored = load_table(tmp_path / "table")
    assert isinstance(restored.storage, FrameStackStorage)
    for attr in ("frame_count", "frame_capacity", "stack", "cursor", "size"):
        assert getattr(restored.storage, attr) == getattr(table.storage, attr), attr
    np.testing.assert_array_equal(restored.storage.frames, table.storage.frames)
    for key, column in table.storage.columns.items():
        np.testing.assert_array_equal(restored.storage.columns[key], column, err_msg=key)
    assert restored.write_count == table.write_count
    after, again = table.sample(64, beta=0.4), restored.sample(64, beta=0.4)
    for key in after:
        np.testing.assert_array_equal(after[key], again[key], err_msg=key)


def frame_write(first_value, transitions, frames):
    """A synthetic frame stream: frame i holds ``first_value + i``; stacks of 2."""
    values = (first_value + np.arange(frames)) % 256
    return {
        "frames": np.broadcast_to(values[:, None, None], (frames, 2, 2)).astype(np.uint8),
        "obs_frame": np.arange(1, 1 + transitions),
        "next_obs_frame": np.arange(2, 2 + transitions),
        "reward": np.zeros(transitions, np.float32),
    }


def test_items_whose_frames_were_overwritten_are_never_sampled():
    table = ReplayTable(8, frame_stack=2, sampler="prioritized", seed=0)
    assert table.storage.frame_capacity == frame_capacity_for(8) == 10
    # Writes of 1 transition and 6 frames: each write overwrites most of the frame ring.
    for seq in range(4):
        table.write(frame_write(10 * seq, 1, 6), "w", seq)
    live = table.storage.live(np.arange(4))
    assert live.tolist() == [False, False, False, True]
    sample = table.sample(50)
    assert set(sample["index"].tolist()) == {3}
    assert (sample["observation"][:, :, 0, 0] == [30, 31]).all()


def test_malformed_frame_streams_are_refused_before_storing():
    table = ReplayTable(8, frame_stack=2)
    bad = frame_write(0, 2, 4)
    bad["obs_frame"] = np.array([0, 1])  # position 0 has no full stack before it
    with pytest.raises(SchemaError, match="obs_frame"):
        table.write(bad, "w", 0)
    with pytest.raises(SchemaError, match="exceeds the ring"):
        table.write(frame_write(0, 1, 11), "w", 1)
    missing = frame_write(0, 1, 3)
    del missing["frames"]
    with pytest.raises(SchemaError, match="frames"):
        table.write(missing, "w", 2)
    assert len(table) == 0 and table.storage.frame_count == 0


def test_async_envs_with_lives_rebuild_exactly_across_terminations():
    # Breakout has 5 lives: episodic life ends an episode (terminated) at each one lost.
    kwargs = {"game": "ALE/Breakout-v5", "noop_max": 5}
    streamed = RolloutWorker(
        make_vector_env(ENV, 2, mode="async", env_kwargs=kwargs),
        UniformActions(3, num_actions=4),
        [5, 6],
        n_step=N_STEP,
        frame_stack=4,
    )
    stacked = RolloutWorker(
        make_vector_env(ENV, 2, env_kwargs=kwargs),
        UniformActions(3, num_actions=4),
        [5, 6],
        n_step=N_STEP,
    )
    table = ReplayTable(2000, frame_stack=4)
    try:
        pairs = [
            (
                stacked.rollout(64, None, policy_version=0).transitions,
                streamed.rollout(64, None, policy_version=0).transitions,
            )
            for _ in range(6)
        ]
    finally:
        streamed.envs.close()
        stacked.envs.close()
    reference = fill(table, pairs)
    assert reference["terminated"].any()  # lives lost inside the data
    stored = table.storage.gather(np.arange(len(table)))
    for key, value in reference.items():
        np.testing.assert_array_equal(stored[key], value, err_msg=key)


def test_a_learner_trains_on_uint8_stacks_from_a_frame_table(rollouts):
    import torch

    from collector.networks.cnn import PixelQSpec
    from learner.config import LearnerConfig
    from learner.core import LearnerCore

    table = ReplayTable(400, frame_stack=4, seed=1)
    fill(table, rollouts)
    torch.manual_seed(0)
    core = LearnerCore(PixelQSpec(4, 84, 84, 6), LearnerConfig(global_batch_size=16))
    batch = core.to_batch(table.sample(16))
    assert batch["observation"].dtype == torch.uint8  # bytes until the network scales them
    before = {k: v.clone() for k, v in core.weights().items()}
    metrics = core.train([batch])
    assert torch.isfinite(metrics["loss_q"])
    assert any(not torch.equal(before[k], v) for k, v in core.weights().items())
    # The IMPALA ResNet torso takes the same uint8 stacks.
    impala = PixelQSpec(4, 84, 84, 6, torso="impala").build()
    with torch.no_grad():
        q_values = impala(batch["observation"][:2])
    assert q_values.shape == (2, 6) and torch.isfinite(q_values).all()


def test_ppo_trains_a_pixel_actor_critic_on_pong_rollouts():
    import torch

    from collector.networks.cnn import PixelActorCriticSpec
    from collector.onpolicy import OnPolicyTransform, OnPolicyWorker
    from learner.config import LearnerConfig
    from learner.core import LearnerCore

    spec = PixelActorCriticSpec(4, 84, 84, 6)
    torch.manual_seed(0)
    network = spec.build()
    envs = make_vector_env(ENV, 2, env_kwargs=ENV_KWARGS, autoreset="same_step")
    worker = OnPolicyWorker(
        envs,
        spec.make_policy(network, np.random.SeedSequence(1)),
        [1, 2],
        OnPolicyTransform(kind="gae"),
    )
    try:
        batch = worker.rollout(16, None, policy_version=0).transitions
    finally:
        envs.close()
    assert batch["observation"].shape == (32, 4, 84, 84)
    assert {"log_prob", "value", "advantage", "value_target"} <= set(batch)
    core = LearnerCore(spec, LearnerConfig(loss="ppo", global_batch_size=32))
    core.policy_network.load_state_dict(network.state_dict())
    before = {k: v.clone() for k, v in core.weights().items()}
    metrics = core.train([core.to_batch(batch)])
    assert torch.isfinite(metrics["loss_objective"]) and torch.isfinite(metrics["loss_critic"])
    assert any(not torch.equal(before[k], v) for k, v in core.weights().items())
