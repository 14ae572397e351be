"""R2D2 and sequence replay (#39): the collector's sequences, the loss term by term, refusals."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collector.envs.spaces import describe
from collector.networks.recurrent import RecurrentQSpec
from collector.sequence_worker import SequenceWorker
from learner.losses.r2d2 import R2D2Loss, mixed_priority, rescale, unrescale
from replay.config import ReplayConfig
from replay.persist.checkpoint import dump_table, load_table
from replay.persist.items import take_items
from replay.persist.reshard import reshard_tables
from replay.table import ReplayTable
from services.checkpoints.resume import check_compatible
from services.config import load_config
from services.config.sections import ConfigError
from services.config.spec import model_spec_for
from tests.conftest import ROOT


class CounterEnv(gym.Env):
    """Observes ``[episode, t]``; episodes of 3 to 24 steps, ending by termination or not."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode = getattr(self, "episode", -1) + 1
        self.t, self.steps = 0, int(self.np_random.integers(3, 25))
        return np.array([self.episode, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t == self.steps
        obs = np.array([self.episode, self.t], np.float32)
        return obs, 1.0, end and self.episode % 2 == 0, end and self.episode % 2 == 1, {}


def q_spec(obs_dim=2, kind="lstm"):
    layout = describe(gym.spaces.Box(-1e6, 1e6, (obs_dim,), np.float32))
    return RecurrentQSpec(
        layout, hidden_sizes=(8,), recurrent=kind, recurrent_hidden_size=6, num_actions=2
    )


@pytest.mark.parametrize("copy", [True, False])  # relayrl's own vector envs reuse buffers
def test_sequences_never_span_two_episodes_overlap_and_count_each_step_once(copy):
    torch.manual_seed(0)
    spec = q_spec()
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    envs = gym.vector.SyncVectorEnv([CounterEnv for _ in range(3)], copy=copy)  # NEXT_STEP
    worker = SequenceWorker(envs, policy, [1, 2, 3], length=8, overlap=3, burn_in=2)
    batches = [worker.rollout(37, 0.5, policy_version=v) for v in range(4)]
    items = {k: np.concatenate([b.transitions[k] for b in batches]) for k in batches[0].transitions}
    assert len(items["valid"]) > 20
    steps = set()
    by_episode: dict[tuple[int, int], list[int]] = {}
    for i, valid in enumerate(items["valid"]):
        real = int(valid.sum())
        assert valid[:real].all() and not valid[real:].any()  # padding only at the end
        obs = items["observation"][i]
        assert (obs[: real + 1, 0] == obs[0, 0]).all()  # one episode, its next state included
        assert (np.diff(obs[: real + 1, 1]) == 1).all()  # consecutive steps
        done = items["terminated"][i] | items["truncated"][i]
        assert not done[: real - 1].any()  # an episode's end closes its sequence
        assert real == 8 or done[real - 1]  # a short sequence is an episode's last
        assert not obs[real + 1 :].any() and not items["reward"][i][real:].any()  # zero padding
        assert (items["burn_in"][i] == 2).all()
        starts_episode = obs[0, 1] == 0
        assert np.any(items["recurrent_state"][i]) != starts_episode  # zeros at episode starts
        steps |= {(int(obs[0, 0]), int(obs[t, 1])) for t in range(real)}
        # collectors keep episodes apart: episode ids are per env, so key on the state too
        by_episode.setdefault((int(obs[0, 0]), int(obs[0, 1])), []).append(i)
    assert sum(b.frames for b in batches) == worker.written_steps
    # Each step counted once: items' real steps minus the overlaps they repeat.
    real_steps = int(items["valid"].sum())
    repeats = int((items["observation"][:, 0, 1] > 0).sum()) * 3  # every non-first item
    assert worker.written_steps == real_steps - repeats
    assert len(steps) <= worker.written_steps
    assert sum(len(b.episode_returns) for b in batches) > 5


def test_state_before_a_sequence_is_the_state_after_the_previous_steps():
    """The stored state of a mid-episode sequence is the network's over the episode so far."""
    torch.manual_seed(1)
    spec = q_spec(kind="gru")
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(1))
    envs = gym.vector.SyncVectorEnv([CounterEnv])
    worker = SequenceWorker(envs, policy, [5], length=4, overlap=0)
    items = worker.rollout(60, 0.0, policy_version=0).transitions
    first, second = items["observation"][0], items["observation"][1]
    assert first[0, 1] == 0 and second[0, 1] == 4 and second[0, 0] == first[0, 0]
    with torch.no_grad():
        _, state = network(torch.as_tensor(first[None, :4]), network.initial_state(1))
    np.testing.assert_allclose(items["recurrent_state"][1], state[0].numpy(), atol=1e-5)


def test_value_rescaling_round_trips():
    x = torch.cat([torch.linspace(-1000, 1000, 2001), torch.tensor([0.0, 1e-4, -3.5, 2e4])])
    x = x.double()
    np.testing.assert_allclose(unrescale(rescale(x)).numpy(), x.numpy(), rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(rescale(unrescale(x)).numpy(), x.numpy(), rtol=1e-9, atol=1e-8)
    assert rescale(torch.tensor(3.0)).item() == pytest.approx(1.0 + 3e-3)  # sqrt(4) - 1 + eps 3


def test_mixed_priority_matches_a_hand_computation():
    td = torch.tensor([[1.0, -3.0, 9.0, 4.0], [2.0, 2.0, 0.5, 7.0]]).abs()
    mask = torch.tensor([[True, True, True, False], [False, True, True, True]])
    expected = [0.9 * 9 + 0.1 * (13 / 3), 0.9 * 7 + 0.1 * (9.5 / 3)]
    np.testing.assert_allclose(mixed_priority(td, mask, 0.9).numpy(), expected, rtol=1e-6)


def sequence_batch(network, steps=7, real=(7, 5), burn_in=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    rows = len(real)
    valid = torch.arange(steps)[None, :] < torch.tensor(real)[:, None]
    terminated = torch.zeros(rows, steps, dtype=torch.bool)
    terminated[-1, real[-1] - 1] = True  # the last sequence ends its episode
    obs = torch.randn(rows, steps + 1, 2, generator=generator)
    obs_valid = torch.cat([torch.ones(rows, 1, dtype=torch.bool), valid], 1)
    return TensorDict(
        {
            "observation": obs * obs_valid[..., None],
            "action": torch.randint(0, 2, (rows, steps), generator=generator) * valid,
            "reward": torch.rand(rows, steps, generator=generator) * valid,
            "terminated": terminated,
            "truncated": torch.zeros(rows, steps, dtype=torch.bool),
            "valid": valid,
            "recurrent_state": torch.randn(rows, network.core.state_size, generator=generator),
            "burn_in": torch.full((rows,), burn_in),
        },
        batch_size=[rows],
    )


def test_priority_and_one_step_targets_match_a_hand_computation():
    torch.manual_seed(2)
    network = q_spec().build()
    loss = R2D2Loss(network, gamma=0.9, n_step=1, value_rescaling=False)
    with torch.no_grad():
        for p in loss.target_network.parameters():
            p.add_(0.1)  # a target network that differs from the online one
    batch = sequence_batch(network)
    out = loss(batch)
    with torch.no_grad():  # the whole sequence from the stored state: burn-in is a split only
        q, _ = network(batch["observation"], batch["recurrent_state"])
        q_target, _ = loss.target_network(batch["observation"], batch["recurrent_state"])
    b, priorities = 2, []
    for row in range(2):
        real = int(batch["valid"][row].sum())
        deltas = []
        for t in range(b, real):
            best = q[row, t + 1].argmax()
            done = bool(batch["terminated"][row, t])
            y = batch["reward"][row, t] + 0.9 * (not done) * q_target[row, t + 1, best]
            deltas.append(abs(float(y - q[row, t, batch["action"][row, t]])))
        priorities.append(0.9 * max(deltas) + 0.1 * sum(deltas) / len(deltas))
    np.testing.assert_allclose(out["td_error"].numpy(), priorities, rtol=1e-4, atol=1e-6)


def test_n_step_targets_stop_at_the_episode_end():
    network = q_spec().build()
    loss = R2D2Loss(network, gamma=0.5, n_step=2, value_rescaling=False)
    batch = TensorDict(
        {
            "reward": torch.ones(1, 5),
            "terminated": torch.tensor([[False, False, False, True, False]]),
        },
        batch_size=[1],
    )
    valid = torch.tensor([[True, True, True, True, False]])
    bootstrap = torch.full((1, 6), 10.0)
    targets = loss._n_step_targets(batch, valid, 0, bootstrap)
    # t0, t1: 1 + 0.5 + 0.25 * 10; t2: ends on the termination; t3: its last step.
    np.testing.assert_allclose(targets[0, :4].numpy(), [4.0, 4.0, 1.5, 1.0])


def test_burn_in_steps_carry_no_gradient():
    torch.manual_seed(3)
    network = q_spec().build()
    loss = R2D2Loss(network, n_step=3)
    batch = sequence_batch(network, burn_in=3)
    batch["observation"].requires_grad_(True)
    batch["recurrent_state"].requires_grad_(True)
    loss(batch)["loss_q"].backward()
    grad = batch["observation"].grad
    assert torch.all(grad[:, :3] == 0) and batch["recurrent_state"].grad is None
    assert grad[:, 3:].abs().sum() > 0  # the learning steps do carry it


def test_the_loss_on_a_padded_sequence_equals_the_unpadded_one():
    torch.manual_seed(4)
    network = q_spec().build()
    loss = R2D2Loss(network, n_step=3)
    padded = sequence_batch(network, steps=9, real=(6,), burn_in=2)[0:1]
    unpadded = padded.clone()
    for key in ("action", "reward", "terminated", "truncated", "valid"):
        unpadded[key] = padded[key][:, :6]
    unpadded["observation"] = padded["observation"][:, :7]  # type: ignore[index]
    unpadded = TensorDict(dict(unpadded.items()), batch_size=[1])
    grads = []
    for batch in (padded, unpadded):
        network.zero_grad()
        out = loss(batch)
        out["loss_q"].backward()
        grads.append([p.grad.clone() for p in network.parameters()])
        grads.append(out["td_error"])
        grads.append(out["loss_q"].detach())
    for a, b in zip(grads[: len(grads) // 2], grads[len(grads) // 2 :], strict=True):
        if isinstance(a, list):
            for x, y in zip(a, b, strict=True):
                torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-5)
        else:
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"sequence_length": 8, "sequence_overlap": 8}, "sequence_overlap"),
        ({"sequence_length": 8, "burn_in": 8}, "burn_in"),
        ({"sequence_length": 1}, "sequence_length"),
        ({"burn_in": 2}, "burn_in"),
    ],
)
def test_replay_refuses_nonsense_sequence_options(fields, named):
    with pytest.raises(ValueError, match=f"^{named}:"):
        ReplayConfig(**fields)


@pytest.mark.parametrize(
    ("config", "overrides", "named"),
    [
        ("cartpole_dqn.yaml", ["replay.sequence_length=8"], "replay.sequence_length"),
        ("cartpole_ppo.yaml", ["replay.sequence_length=8"], "replay.sequence_length"),
        ("statelesscartpole_r2d2.yaml", ["learner.recurrent=none"], "learner.recurrent"),
        ("statelesscartpole_r2d2.yaml", ["replay.sequence_length=0", "replay.burn_in=0",
                                         "replay.sequence_overlap=0"], "replay.sequence_length"),
        ("statelesscartpole_r2d2.yaml", ["collector.n_step=3"], "collector.n_step"),
        ("statelesscartpole_r2d2.yaml", ["replay.frame_stack=4"], "replay.frame_stack"),
        ("statelesscartpole_r2d2.yaml", ["collector.action_mask_key=mask"],
         "collector.action_mask_key"),
        ("statelesscartpole_r2d2.yaml", ["collector.env_id=collector.envs.testing:corridor"],
         "replay.sequence_length"),
    ],
)  # fmt: skip
def test_sequence_runs_refuse_what_cannot_train_naming_the_field(config, overrides, named):
    with pytest.raises(ConfigError, match=f"^{named}:"):
        config = load_config(ROOT / "deploy" / "configs" / config, overrides)
        model_spec_for(config)  # the checks that need the env's spaces


def sequence_tables(num_tables=2):
    """Prioritized tables holding a collector's sequences, with R2D2-like priorities set."""
    torch.manual_seed(5)
    spec = q_spec()
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(5))
    worker = SequenceWorker(
        gym.vector.SyncVectorEnv([CounterEnv, CounterEnv]), policy, [7, 8], length=6, overlap=2
    )
    tables = [ReplayTable(64, sampler="prioritized", seed=i, alpha=0.9) for i in range(num_tables)]
    for seq in range(4):
        items = worker.rollout(20, 0.3, policy_version=seq).transitions
        tables[seq % num_tables].write(items, f"collector-{seq % num_tables}", seq)
    for i, table in enumerate(tables):
        drawn = table.sample(8)
        priorities = np.arange(1, 9, dtype=np.float64) * (i + 1)
        table.update_priorities(drawn["index"], drawn["insertion_id"], priorities)
    return tables


def item_rows(tables):
    rows = set()
    for table in tables:
        items = take_items(table)
        for i in range(len(items.insertion_id)):
            state = items.columns["recurrent_state"][i].tobytes()
            rows.add((items.columns["observation"][i].tobytes(), state, float(items.mass[i])))
    return rows


def test_sequence_items_survive_a_replay_checkpoint_and_draw_the_same_samples(tmp_path):
    [table] = sequence_tables(1)
    dump_table(table, tmp_path / "replay-0")
    restored = load_table(tmp_path / "replay-0")
    assert item_rows([restored]) == item_rows([table]) and len(restored) == len(table) > 8
    a, b = table.sample(16, beta=0.6), restored.sample(16, beta=0.6)
    for key in ("observation", "valid", "recurrent_state", "burn_in", "index", "weight"):
        np.testing.assert_array_equal(a[key], b[key])
    assert a["observation"].shape[1:] == (7, 2) and a["recurrent_state"].shape[1:] == (12,)


def test_sequence_items_reshard_with_their_states_and_priorities():
    old = sequence_tables(2)
    new = reshard_tables(old, 3, capacity_per_shard=64, seeds=[0, 1, 2])
    assert item_rows(new) == item_rows(old)  # every sequence once, its state and mass intact
    assert sum(len(t) for t in new) == sum(len(t) for t in old)
    batch = new[2].sample(4)
    assert batch["valid"].shape == (4, 6) and batch["observation"].shape == (4, 7, 2)


def test_collector_state_survives_a_weights_update_and_a_reset_starts_fresh():
    torch.manual_seed(6)
    spec = q_spec()
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(6))
    worker = SequenceWorker(
        gym.vector.SyncVectorEnv([CounterEnv, CounterEnv]), policy, [3, 4], length=50
    )
    worker.rollout(2, 0.0, policy_version=0)  # both envs mid-episode (episodes last >= 3)
    before, cursor = worker.state.copy(), worker.cursor.copy()
    assert np.abs(before).sum(-1).min() > 0
    with torch.no_grad():  # new weights applied in place, as collectors apply them
        for parameter in network.parameters():
            parameter.add_(0.5)
    worker.rollout(1, 0.0, policy_version=1)
    # The step after the update acted from the state the old weights left: nothing was reset.
    np.testing.assert_array_equal(worker.buffers["state"][[0, 1], cursor], before)
    worker.reset([9, 10])  # a resumed collector: fresh episodes, fresh states, no open sequence
    assert not worker.state.any() and not worker.cursor.any()


def test_a_resume_with_other_sequences_is_refused_naming_the_field():
    config = load_config(ROOT / "deploy" / "configs" / "statelesscartpole_r2d2.yaml")
    saved = config.to_dict()
    other = load_config(
        ROOT / "deploy" / "configs" / "statelesscartpole_r2d2.yaml", ["replay.sequence_length=30"]
    )
    check_compatible(saved, config)
    with pytest.raises(ConfigError, match="^replay.sequence_length: the checkpoint"):
        check_compatible(saved, other)
