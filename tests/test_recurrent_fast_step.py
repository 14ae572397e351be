"""Recurrent acting's one-step path (``forward_step``) against the sequence path, and resets.

Collectors act through :class:`~collector.networks.stepping.StepView`, which runs a built-in
recurrent network's ``forward_step`` (the cell function over the core's weights, no sequence
machinery); a user's network following the state protocol keeps stepping through ``forward``.
Both must give what the learner's sequence path computes.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from collector.config import OnPolicyTransform
from collector.envs.spaces import describe
from collector.envs.vector import make_vector_env
from collector.networks.actor_critic import ActorCriticSpec, StochasticActor
from collector.networks.recurrent import (
    RecurrentActorCritic,
    RecurrentActorCriticSpec,
    RecurrentCore,
    RecurrentQSpec,
)
from collector.networks.stepping import RecurrentPolicy, StepView, fast_step
from collector.onpolicy import OnPolicyWorker

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
KINDS = ["lstm", "gru"]
SPACES = {"mlp": BOX, "cnn": IMAGE}


def observations(space, steps, batch, seed=0):
    rng = np.random.default_rng(seed)
    if space.dtype == np.uint8:
        return rng.integers(0, 256, (steps, batch, *space.shape), dtype=np.uint8)
    return rng.normal(size=(steps, batch, *space.shape)).astype(np.float32)


def spec_for(family, kind, space, **kwargs):
    common = dict(hidden_sizes=(16,), recurrent=kind, recurrent_hidden_size=8, **kwargs)
    if family == "q":
        return RecurrentQSpec(describe(space), num_actions=3, **common)
    return RecurrentActorCriticSpec(describe(space), action_dim=3, **common)


def sequence_path(network, obs, state, reset=None):
    """The learner's path: whole sequences ``[B, T]`` through ``forward`` (autograd on)."""
    x = torch.as_tensor(obs).transpose(0, 1)
    reset = None if reset is None else torch.as_tensor(reset).transpose(0, 1)
    *heads, last = network(x, state, reset)
    return [head.detach().transpose(0, 1) for head in heads], last.detach()


@pytest.mark.parametrize("torso", sorted(SPACES))
@pytest.mark.parametrize("family", ["q", "actor_critic"])
@pytest.mark.parametrize("kind", KINDS)
def test_forward_step_gives_the_sequence_paths_heads_and_states(kind, family, torso):
    space = SPACES[torso]
    torch.manual_seed(0)
    network = spec_for(family, kind, space).build()
    assert fast_step(network) is not None
    obs = observations(space, 6, 4)
    state = torch.randn(4, network.initial_state(1).shape[-1]) * 0.5
    heads, last = sequence_path(network, obs, state)
    step_state = state
    for t in range(6):
        with torch.inference_mode():
            *step_heads, step_state = network.forward_step(torch.as_tensor(obs[t]), step_state)
        for head, step_head in zip(heads, step_heads, strict=True):
            torch.testing.assert_close(step_head, head[t], atol=1e-6, rtol=0)
    torch.testing.assert_close(step_state, last, atol=1e-6, rtol=0)
    # and outside inference mode (an evaluation loop with autograd on) the same
    *step_heads, _ = network.forward_step(torch.as_tensor(obs[0]), state)
    torch.testing.assert_close(step_heads[0].detach(), heads[0][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_the_core_step_is_the_fused_sequence_ops_step(kind):
    torch.manual_seed(1)
    core = RecurrentCore(kind, 5, 7)
    x, state = torch.randn(3, 4, 5), torch.randn(3, core.state_size)
    out, last = core(x, state)  # one nn.LSTM / nn.GRU call
    for t in range(4):
        y, state = core.step(x[:, t], state)
        torch.testing.assert_close(y, out[:, t].detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(state, last.detach(), atol=1e-6, rtol=0)


def slow_view_policy(spec, network, seed):
    """The spec's policy with its view forced through ``forward`` (the sequence path)."""
    policy = spec.make_policy(network, np.random.SeedSequence(seed))
    policy.view.fast_step = None
    return policy


@pytest.mark.parametrize("torso", sorted(SPACES))
@pytest.mark.parametrize("family", ["q", "actor_critic"])
@pytest.mark.parametrize("kind", KINDS)
def test_acting_fast_gives_the_actions_log_probs_values_and_states_of_the_sequence_path(
    kind, family, torso
):
    space = SPACES[torso]
    torch.manual_seed(2)
    spec = spec_for(family, kind, space)
    network = spec.build()
    fast = spec.make_policy(network, np.random.SeedSequence(5))
    slow = slow_view_policy(spec, network, 5)
    assert fast.view.fast_step is not None
    obs = observations(space, 8, 5, seed=3)
    explore = {"epsilon": 0.3} if family == "q" else {}
    fast_state, slow_state = fast.initial_state(5), slow.initial_state(5)
    for t in range(8):
        a1, e1, fast_state = fast.act(obs[t], explore, state=fast_state)
        a2, e2, slow_state = slow.act(obs[t], explore, state=slow_state)
        np.testing.assert_array_equal(a1, a2)
        assert sorted(e1) == sorted(e2)
        for key in e1:
            np.testing.assert_allclose(e1[key], e2[key], atol=1e-6, rtol=0)
        np.testing.assert_allclose(fast_state, slow_state, atol=1e-6, rtol=0)
        if t == 3:  # an episode starts in rows 1 and 4: zeros, as the workers set them
            fast_state[[1, 4]] = 0.0
            slow_state[[1, 4]] = 0.0
    # the whole run against one pass of the sequences with those resets
    reset = np.zeros((8, 5), bool)
    reset[4, [1, 4]] = True
    heads, last = sequence_path(network, obs, network.initial_state(5), reset)
    np.testing.assert_allclose(fast_state, last.numpy(), atol=1e-6, rtol=0)
    if family == "actor_critic":  # the values acted with are the sequence's
        np.testing.assert_allclose(e1["value"], heads[1][-1].numpy(), atol=1e-6, rtol=0)


class UsersGRU(nn.Module):
    """A user's network that follows the state protocol (no ``forward_step``)."""

    def __init__(self, obs_dim=3, actions=2, hidden=6):
        super().__init__()
        self.core = RecurrentCore("gru", obs_dim, hidden)
        self.actor, self.critic = nn.Linear(hidden, actions), nn.Linear(hidden, 1)
        self.spec = ActorCriticSpec(hidden, actions)  # what StochasticActor samples by
        self.calls = 0

    def initial_state(self, batch, device=None):
        return self.core.initial_state(batch, device)

    def forward(self, obs, state, reset=None, valid=None):
        self.calls += 1
        memories, state = self.core(obs, state, reset, valid)
        return self.actor(memories), self.critic(memories).squeeze(-1), state

    def distribution(self, out):
        return torch.distributions.Categorical(logits=out)


class Doubled(RecurrentActorCritic):
    """A subclass of a built-in network that changes ``forward`` only."""

    def forward(self, observation, state, reset=None, valid=None):
        out, value, state = super().forward(observation, state, reset, valid)
        return 2 * out, value, state


def test_a_users_network_and_a_subclass_changing_forward_step_through_forward():
    users = UsersGRU()
    assert fast_step(users) is None
    view = StepView(users)
    view.state = users.initial_state(2)
    with torch.inference_mode():
        out, _ = view(torch.zeros(2, 3))
    assert users.calls == 1 and out.shape == (2, 2) and view.next_state.shape == (2, 6)
    spec = spec_for("actor_critic", "gru", BOX)
    doubled = Doubled(spec)
    assert fast_step(doubled) is None
    view = StepView(doubled)
    view.state = doubled.initial_state(2)
    x = torch.randn(2, 3)
    with torch.inference_mode():
        out, _ = view(x)
        plain, _, _ = doubled.forward_step(x, doubled.initial_state(2))
    torch.testing.assert_close(out, 2 * plain)


def test_a_user_policy_over_the_protocol_acts_as_the_sequence_path():
    torch.manual_seed(4)
    users = UsersGRU()
    view = StepView(users)
    policy = RecurrentPolicy(StochasticActor(view, np.random.SeedSequence(0)), view)
    obs = observations(BOX, 5, 2)
    state = policy.initial_state(2)
    for t in range(5):
        _, extras, state = policy.act(obs[t], {}, state=state)
    (_, value), last = sequence_path(users, obs, users.initial_state(2))
    np.testing.assert_allclose(state, last.numpy(), atol=1e-6, rtol=0)
    np.testing.assert_allclose(extras["value"], value[-1].numpy(), atol=1e-6, rtol=0)


class Recorder:
    """Wraps a recurrent policy; keeps a copy of every state it is handed."""

    recurrent = True

    def __init__(self, policy):
        self.policy, self.seen, self.returned = policy, [], []

    def initial_state(self, n):
        return self.policy.initial_state(n)

    def act(self, obs, explore, *, state, mask=None):
        self.seen.append(np.array(state, copy=True))
        actions, extras, next_state = self.policy.act(obs, explore, state=state, mask=mask)
        self.returned.append(np.array(next_state, copy=True))
        return actions, extras, next_state

    def value(self, obs, state):
        return self.policy.value(obs, state)


@pytest.mark.parametrize("kind", KINDS)
def test_the_worker_zeroes_states_exactly_at_episode_starts_and_keeps_stored_states(kind):
    envs = make_vector_env("CartPole-v1", 4, autoreset="same_step")
    torch.manual_seed(0)
    spec = RecurrentActorCriticSpec(
        describe(envs.single_observation_space), (8,), kind, 8, action_dim=2
    )
    recorder = Recorder(spec.make_policy(spec.build(), np.random.SeedSequence(0)))
    worker = OnPolicyWorker(envs, recorder, [0, 1, 2, 3], OnPolicyTransform(sequence_length=4))
    starts = np.ones(4, bool)  # after reset() every env starts an episode
    for _ in range(3):
        batch = worker.rollout(num_steps=24, explore={}, policy_version=0)
        items = batch.transitions
        seen = recorder.seen[-24:]
        returned = [recorder.returned[-25]] if len(recorder.returned) > 24 else [None]
        returned += recorder.returned[-24:-1]
        done = items["terminated"] | items["truncated"]  # [4 * 6 items, 4]: env-major
        done_steps = done.reshape(4, 24).T  # [T, env]
        for t in range(24):
            state, previous = seen[t], returned[t]
            np.testing.assert_array_equal(state[starts], 0.0)
            if previous is not None:
                np.testing.assert_array_equal(state[~starts], previous[~starts])
            starts = done_steps[t]
        # the stored state before each sequence is the one acted on then, not zeroed later
        stored = items["recurrent_state"].reshape(4, 6, -1)
        for piece in range(6):
            np.testing.assert_array_equal(stored[:, piece], seen[4 * piece])
        np.testing.assert_array_equal(items["reset"][:, 0], stored.reshape(24, -1).any(1) == 0)
    assert np.concatenate([s.reshape(-1) for s in recorder.seen]).any()
    envs.close()


class Aliasing(Recorder):
    """Hands back a view of the state it was given every other step (its memory, not a copy)."""

    def act(self, obs, explore, *, state, mask=None):
        self.seen.append(np.array(state, copy=True))
        actions, extras, next_state = self.policy.act(obs, explore, state=state, mask=mask)
        if len(self.seen) % 2 == 0:
            next_state = state[:]
        self.returned.append(np.array(next_state, copy=True))
        return actions, extras, next_state


def test_a_state_handed_back_by_the_policy_is_not_zeroed_under_a_stored_sequence():
    envs = make_vector_env("CartPole-v1", 4, autoreset="same_step")
    torch.manual_seed(0)
    spec = RecurrentActorCriticSpec(describe(envs.single_observation_space), (8,), "gru", 8)
    recorder = Aliasing(spec.make_policy(spec.build(), np.random.SeedSequence(0)))
    worker = OnPolicyWorker(envs, recorder, [0, 1, 2, 3], OnPolicyTransform(sequence_length=1))
    for _ in range(3):
        items = worker.rollout(num_steps=24, explore={}, policy_version=0).transitions
        stored = items["recurrent_state"].reshape(4, 24, -1)  # one-step sequences: every state
        for t, seen in enumerate(recorder.seen[-24:]):
            np.testing.assert_array_equal(stored[:, t], seen)
    assert items["reset"][24:].any()
    envs.close()
