"""Sequences that store each Atari frame once (#39): bit-identical stacks, bytes, persistence."""

import numpy as np
import pytest
import torch

from collector.envs.vector import make_vector_env
from collector.sequence_worker import SequenceWorker
from learner.core import LearnerCore
from replay.persist.checkpoint import dump_table, load_table
from replay.persist.items import take_items
from replay.persist.reshard import reshard_tables
from replay.sequence_frames import FRAMES_COLUMN, encode_sequence_frames, rebuild_stacks
from replay.table import ReplayTable
from services.checkpoints.resume import check_compatible
from services.config import ConfigError, load_config
from services.config.spec import model_spec_for
from services.driver.actors import sequence_layout
from tests.conftest import ROOT

ENV = "collector.atari:make_atari"
# Short episodes, so a few rollouts cross many episode boundaries (truncations).
ENV_KWARGS = {"game": "ALE/Pong-v5", "max_episode_steps": 23, "noop_max": 5}
NUM_ENVS, STEPS, ROLLOUTS = 2, 24, 5
LENGTH, OVERLAP, BURN_IN = 16, 8, 4
R2D2 = ROOT / "deploy" / "configs" / "pong_r2d2_gpu.yaml"
STACKED = ["collector.env_kwargs={game: ALE/Pong-v5, frame_stack: 4}", "replay.frame_stack=4"]


class UniformRecurrent:
    """A recurrent collector policy drawing uniform actions; its state counts steps."""

    def __init__(self, seed, num_actions=6):
        self.rng = np.random.default_rng(seed)
        self.num_actions = num_actions

    def initial_state(self, n):
        return np.zeros((n, 3), np.float32)

    def act(self, obs, explore, state):
        return self.rng.integers(0, self.num_actions, size=len(obs)), {}, state + 1.0


def worker(frame_stack):
    envs = make_vector_env(ENV, NUM_ENVS, env_kwargs=ENV_KWARGS)
    return SequenceWorker(
        envs, UniformRecurrent(7), [11, 12], length=LENGTH, overlap=OVERLAP, burn_in=BURN_IN,
        frame_stack=frame_stack,
    )  # fmt: skip


@pytest.fixture(scope="module")
def items():
    """The same sequences twice: observations stored whole, and each frame stored once."""
    whole, once = worker(0), worker(4)
    batches = [
        (w.rollout(STEPS, 1.0, policy_version=r).transitions for w in (whole, once))
        for r in range(ROLLOUTS)
    ]
    pairs = [tuple(pair) for pair in batches]
    whole.envs.close()
    once.envs.close()
    concat = [{k: np.concatenate([p[i][k] for p in pairs]) for k in pairs[0][i]} for i in (0, 1)]
    return concat[0], concat[1]


def test_rebuilt_stacks_equal_the_env_stacks_bit_for_bit(items):
    reference, compact = items
    obs = reference["observation"]  # [N, L + 1, 4, 84, 84]
    valid = reference["valid"]
    # The sequences cover what the encoding must get right: episodes' first stacks (the reset
    # frame repeated), padded episode ends, and overlapping sequences of one episode.
    first = (obs[:, 0] == obs[:, 0, :1]).all(axis=(1, 2, 3)) & obs[:, 0].any(axis=(1, 2, 3))
    assert first.sum() >= 4 and (~valid.all(1)).sum() >= 4 and valid.all(1).sum() >= 2
    overlapping = [
        i for i in range(len(obs) - 1) if np.array_equal(obs[i, LENGTH - OVERLAP], obs[i + 1, 0])
    ]
    assert overlapping
    assert FRAMES_COLUMN in compact and "observation" not in compact
    assert compact[FRAMES_COLUMN].shape[1:] == (LENGTH + 4, 84, 84)
    for key, value in reference.items():
        if key != "observation":
            np.testing.assert_array_equal(compact[key], value, err_msg=key)
    rebuilt = rebuild_stacks(torch.as_tensor(compact[FRAMES_COLUMN]), torch.as_tensor(valid))
    assert rebuilt.dtype == torch.uint8
    np.testing.assert_array_equal(rebuilt.numpy(), obs)


def test_each_sequence_stores_its_frames_in_far_fewer_bytes(items):
    reference, compact = items
    tables = []
    for columns in (reference, compact):
        table = ReplayTable(64, sampler="prioritized", seed=0)
        table.write(columns, "collector-0", 0)
        tables.append(table)
    whole, once = (t.storage.nbytes / len(t) for t in tables)
    # 17 stacks of 4 frames against 20 frames: 68 / 20 = 3.4 for the observations alone.
    assert whole / once > 2.5, (whole, once)


def test_encoding_refuses_stacks_that_are_not_shifted_frames():
    stacks = np.zeros((1, 3, 2, 1, 1), np.uint8)
    stacks[0, 1] = [[[1]], [[2]]]  # stack 1 does not begin with stack 0's newest frame
    with pytest.raises(ValueError, match="^replay.frame_stack:"):
        encode_sequence_frames(stacks, np.ones((1, 2), bool))
    with pytest.raises(ValueError, match="^replay.frame_stack:"):  # 2 frames, 3 observations
        rebuild_stacks(torch.zeros(1, 2, 1, 1, dtype=torch.uint8), torch.ones(1, 2))


def tables_of(columns, seed, num_tables=1):
    tables = [
        ReplayTable(64, sampler="prioritized", seed=seed, alpha=0.9) for _ in range(num_tables)
    ]
    for i, table in enumerate(tables):
        part = {k: v[i::num_tables] for k, v in columns.items()}
        table.write(part, f"collector-{i}", 0)
        drawn = table.sample(8)
        table.update_priorities(drawn["index"], drawn["insertion_id"], np.arange(1.0, 9.0))
    return tables


def test_a_checkpoint_restores_the_compact_items_and_draws_the_same_stacks(items, tmp_path):
    reference, compact = items
    [whole], [once] = tables_of(reference, 3), tables_of(compact, 3)
    dump_table(once, tmp_path / "replay-0")
    restored = load_table(tmp_path / "replay-0")
    assert len(restored) == len(whole) and FRAMES_COLUMN in restored.storage.columns
    expected, drawn = whole.sample(16, beta=0.6), restored.sample(16, beta=0.6)
    np.testing.assert_array_equal(drawn["index"], expected["index"])
    np.testing.assert_array_equal(drawn["weight"], expected["weight"])
    rebuilt = rebuild_stacks(torch.as_tensor(drawn[FRAMES_COLUMN]), torch.as_tensor(drawn["valid"]))
    np.testing.assert_array_equal(rebuilt.numpy(), expected["observation"])


def test_compact_items_reshard_with_their_frames_and_priorities(items):
    _, compact = items
    old = tables_of(compact, 4, num_tables=2)
    new = reshard_tables(old, 3, capacity_per_shard=64, seeds=[0, 1, 2])

    def rows(tables):
        out = set()
        for table in tables:
            taken = take_items(table)
            for i in range(len(taken.insertion_id)):
                frames = taken.columns[FRAMES_COLUMN][i].tobytes()
                out.add((frames, taken.columns["valid"][i].tobytes(), float(taken.mass[i])))
        return out

    assert rows(new) == rows(old) and sum(map(len, new)) == len(compact["valid"])


@pytest.fixture(scope="module")
def pixel_r2d2():
    config = load_config(
        R2D2,
        [
            *STACKED,
            "learner.resources_per_rank={CPU: 1}",
            "learner.hidden_sizes=[32]",
            "learner.recurrent_hidden_size=16",
            f"replay.sequence_length={LENGTH}",
            f"replay.sequence_overlap={OVERLAP}",
            f"replay.burn_in={BURN_IN}",
        ],
    )
    return config, model_spec_for(config)


def test_the_learner_rebuilds_the_stacks_and_trains_on_the_same_loss(items, pixel_r2d2):
    reference, compact = items
    config, spec = pixel_r2d2
    torch.manual_seed(0)
    core = LearnerCore(spec, config.learner)
    rows = np.arange(3)
    # The stub policy's states stand in for the network's (the same random ones in both).
    state = np.random.default_rng(0).normal(size=(len(rows), 32)).astype(np.float32)
    whole, once = (
        core.to_batch({**{k: v[rows] for k, v in columns.items()}, "recurrent_state": state})
        for columns in (reference, compact)
    )
    assert FRAMES_COLUMN not in set(once.keys())
    assert torch.equal(once["observation"], whole["observation"])
    with torch.no_grad():
        a, b = core.loss_module(whole), core.loss_module(once)
    assert torch.equal(a["loss_q"], b["loss_q"]) and torch.isfinite(a["loss_q"])


def test_the_run_config_stores_frames_once_in_sequences_of_plain_shards(pixel_r2d2):
    config, _ = pixel_r2d2
    layout = sequence_layout(config.replay)
    assert layout.frame_stack == 4 and config.replay.frame_ring == 0  # no shard frame ring
    saved = load_config(R2D2, STACKED).to_dict()
    other_shards = load_config(R2D2, [*STACKED, "replay.num_shards=3"])
    check_compatible(saved, other_shards)  # compact sequences re-shard on resume
    whole = load_config(R2D2, [STACKED[0]])
    with pytest.raises(ConfigError, match="^replay.frame_stack: the checkpoint"):
        check_compatible(saved, whole)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["replay.frame_stack=1"], "replay.frame_stack"),  # one frame each: nothing to dedup
        (["replay.frame_stack=4"], "replay.frame_stack"),  # the env stacks 1 frame
        ([STACKED[0], "replay.frame_stack=3"], "replay.frame_stack"),
        ([*STACKED, "grpc.port=0"], "grpc.port"),
    ],
)
def test_frames_once_with_sequences_is_refused_where_it_cannot_apply(overrides, named):
    with pytest.raises(ConfigError, match=f"^{named}:"):
        config = load_config(R2D2, ["learner.resources_per_rank={CPU: 1}", *overrides])
        model_spec_for(config)
