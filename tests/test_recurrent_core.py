"""The recurrent core and policies (``collector.networks.recurrent``): resets, padding, state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from collector.envs.spaces import describe
from collector.networks.recurrent import (
    RecurrentActorCriticSpec,
    RecurrentCore,
    RecurrentQSpec,
)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_padding_changes_neither_outputs_nor_gradients_and_the_state_is_the_last_real_steps(kind):
    torch.manual_seed(0)
    core = RecurrentCore(kind, 3, 5)
    x = torch.randn(2, 6, 3)
    lengths = [6, 4]
    state0 = torch.randn(2, core.state_size)
    # Unpadded: each row on its own.
    outs, states, grads = [], [], []
    for row, length in enumerate(lengths):
        core.zero_grad()
        y, s = core(x[row : row + 1, :length], state0[row : row + 1])
        y.sum().backward()
        outs.append(y[0])
        states.append(s[0])
        grads.append([p.grad.clone() for p in core.parameters()])
    # Padded: one batch, garbage in the padding.
    padded = x.clone()
    padded[1, 4:] = 1e3
    valid = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    core.zero_grad()
    y, s = core(padded, state0, valid=valid)
    (y * valid.unsqueeze(-1)).sum().backward()
    torch.testing.assert_close(y[0], outs[0])
    torch.testing.assert_close(y[1, :4], outs[1])
    torch.testing.assert_close(s, torch.stack(states))
    for p, g0, g1 in zip(core.parameters(), grads[0], grads[1], strict=True):
        torch.testing.assert_close(p.grad, g0 + g1, rtol=1e-4, atol=1e-5)


def test_a_reset_zeroes_the_state_exactly_at_an_episode_start():
    torch.manual_seed(1)
    core = RecurrentCore("lstm", 2, 4)
    x = torch.randn(3, 7, 2)
    state = torch.randn(3, core.state_size)
    reset = torch.zeros(3, 7, dtype=torch.bool)
    reset[1, 2] = True  # row 1: a new episode at step 2
    y, _ = core(x, state, reset)
    fresh, _ = core(x[1:2, 2:], core.initial_state(1))
    torch.testing.assert_close(y[1, 2:], fresh[0])
    same, _ = core(x[[0, 2]], state[[0, 2]])  # the other rows never reset
    torch.testing.assert_close(y[[0, 2]], same)
    assert not torch.allclose(y[1, :2], fresh[0, :2])


def test_the_policies_state_advances_step_by_step_like_a_whole_sequence():
    space = gym.spaces.Box(-1, 1, (3,))
    torch.manual_seed(2)
    for spec in (
        RecurrentQSpec(describe(space), num_actions=2, recurrent="gru", recurrent_hidden_size=8),
        RecurrentActorCriticSpec(describe(space), action_dim=2, recurrent_hidden_size=8),
    ):
        network = spec.build()
        policy = spec.make_policy(network, np.random.SeedSequence(0))
        obs = np.random.default_rng(0).normal(size=(5, 2, 3)).astype(np.float32)
        state = policy.initial_state(2)
        for t in range(5):  # epsilon 1: random actions, the state still advances
            _, _, state = policy.act(obs[t], {"random": True}, state=state)
        *_, whole = network(torch.from_numpy(obs).transpose(0, 1), network.initial_state(2))
        np.testing.assert_allclose(state, whole.detach().numpy(), atol=1e-6)
        assert state.shape == (2, spec.state_size)
