"""A recurrent policy after training: load_policy's state API, evaluation and exports (no Ray).

Checkpoints are a learner core's state with perturbed weights, written through the real
checkpoint store (``tests.test_policy.write_checkpoint``). Until an algorithm registers
``recurrent``, the fixture marks PPO and DQN recurrent for this module only (the registration
decides nothing else that loading reads).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from collector.envs.vector import gym_id, make_env
from services.evaluation.envs import make_evaluation_envs
from services.evaluation.playback import GreedyActions, evaluate_policy
from services.evaluation.schedule import evaluation_seeds, run_episodes
from services.policy import load_policy
from services.policy.export import export_policy, missing_onnx_packages
from tests.test_policy import write_checkpoint

STATELESS = "collector.env_id=relayrl:StatelessCartPole-v1"
CASES = {
    "ppo-gru": ["algorithm=ppo", STATELESS, "learner.recurrent=gru"],
    "r2d2-lstm": ["algorithm=r2d2", STATELESS, "learner.recurrent=lstm"],
    "ppo-ff": ["algorithm=ppo", STATELESS],
    "ppo-gru-dict": [
        "algorithm=ppo",
        "collector.env_id=tests.action_envs:masked_corridor",
        "collector.action_mask_key=action_mask",
        "learner.recurrent=gru",
    ],
    "ppo-gru-masked": [
        "algorithm=ppo",
        "collector.env_id=tests.action_envs:info_masked",
        "collector.action_mask_key=legal",
        "learner.recurrent=gru",
    ],
}
HIDDEN = ["learner.recurrent_hidden_size=16", "learner.hidden_sizes=[16]"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``id -> run directory`` of each case ."""
    out = {}
    for name, overrides in CASES.items():
        root = tmp_path_factory.mktemp(name) / "checkpoints"
        write_checkpoint(root, None, [*overrides, *HIDDEN], seed=3)
        out[name] = root.parent
    return out


@pytest.mark.parametrize("name", ["ppo-gru", "r2d2-lstm"])
def test_act_takes_and_returns_the_state_like_the_network_over_the_whole_sequence(
    checkpoints, name
):
    policy = load_policy(checkpoints[name])
    size = 32 if name == "r2d2-lstm" else 16  # LSTM: h and c side by side
    assert policy.recurrent and policy.initial_state().shape == (size,)
    assert policy.initial_state(3).shape == (3, size) and not policy.initial_state(3).any()
    obs = np.random.default_rng(0).uniform(-1, 1, (6, 3, 2)).astype(np.float32)  # [T, B, 2]
    state = policy.initial_state(3)
    actions = []
    for t in range(6):
        action, state = policy.act(obs[t], state=state)
        actions.append(action)
    network = policy.network
    with torch.no_grad():
        out, *_, whole = network(torch.from_numpy(obs).transpose(0, 1), network.initial_state(3))
    np.testing.assert_allclose(state, whole.numpy(), atol=1e-6)
    np.testing.assert_array_equal(np.stack(actions, 1), out.argmax(-1).numpy())
    # one observation: [state_size] in and out; None is an episode's first step; torch in kind
    one, one_state = policy.act(obs[0, 1], state=None)
    assert one == actions[0][1] and one_state.shape == (size,)
    as_torch, torch_state = policy.act(torch.from_numpy(obs[0]), state=torch.zeros(3, size))
    assert isinstance(torch_state, torch.Tensor) and torch_state.shape == (3, size)
    np.testing.assert_array_equal(as_torch.numpy(), actions[0])
    sampled, sampled_state = policy.act(obs[0], deterministic=False, state=policy.initial_state(3))
    assert sampled.shape == (3,)  # sampling moves the state as acting greedily does
    np.testing.assert_allclose(sampled_state, torch_state.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match=rf"state: expected \[3, {size}\].*got \[2, {size}\]"):
        policy.act(obs[0], state=np.zeros((2, size), np.float32))


def test_a_feed_forward_policy_refuses_a_state(checkpoints):
    policy = load_policy(checkpoints["ppo-ff"])
    assert not policy.recurrent
    assert policy.act(np.zeros(2, np.float32)) in (0, 1)  # one action, no state
    with pytest.raises(ValueError, match="state: the policy is feed-forward"):
        policy.act(np.zeros(2, np.float32), state=np.zeros(4, np.float32))


def _episode_lengths_one_by_one(policy, seed, episodes):
    """Each episode from a fresh state on a plain env (what the vector env's autoreset replays)."""
    env = gym.make(gym_id(policy.config.collector.env_id))
    obs, _ = env.reset(seed=seed)
    lengths = []
    for _ in range(episodes):
        state, done, steps = policy.initial_state(), False, 0
        while not done:
            action, state = policy.act(obs, state=state)
            obs, _, terminated, truncated, _ = env.step(int(action))
            done, steps = terminated or truncated, steps + 1
        lengths.append(steps)
        obs, _ = env.reset()
    return lengths


class RecordedStates(GreedyActions):
    """The greedy actions, keeping each state ``run_episodes`` hands over (a test probe)."""

    def __init__(self, policy) -> None:
        super().__init__(policy)
        self.states: list[np.ndarray] = []

    def act(self, obs, explore=None, *, mask=None, state=None):
        self.states.append(np.array(state))
        return super().act(obs, explore, mask=mask, state=state)


def test_evaluate_carries_the_state_and_resets_it_at_every_episode_start(checkpoints):
    policy = load_policy(checkpoints["ppo-gru"])
    result = evaluate_policy(policy, episodes=4, num_envs=2, seed=5)
    seeds = evaluation_seeds(5, 2)  # env i plays episodes i, i + 2 (two each)
    alone = [n for seed in seeds for n in _episode_lengths_one_by_one(policy, seed, 2)]
    assert sorted(result["lengths"]) == sorted(alone)
    sampled = evaluate_policy(policy, episodes=2, num_envs=2, deterministic=False)  # the sampler
    assert sampled["episodes"] == 2
    # what run_episodes hands the policy: zeros exactly at each episode's first step
    envs = make_evaluation_envs(policy.spec, policy.config.collector.env_id, 1)
    probe = RecordedStates(policy)
    try:
        _, lengths = run_episodes(envs, probe, 3, evaluation_seeds(5, 1))
    finally:
        envs.close()
    zero = ~np.stack(probe.states)[:, 0].any(-1)
    starts = np.cumsum([0, *(n + 1 for n in lengths[:-1])])  # an episode, its autoreset step
    assert zero[starts].all() and zero.sum() == len(starts)


def _pt2(path):
    program = torch.export.load(str(path)).module()

    def run(*inputs):
        with torch.inference_mode():
            return [x.numpy() for x in program(*(torch.as_tensor(x) for x in inputs))]

    return run


def _onnx(path):
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [arg.name for arg in session.get_inputs()]
    return lambda *inputs: session.run(None, dict(zip(names, inputs, strict=True)))


ONNX = pytest.mark.skipif(bool(missing_onnx_packages()), reason="no onnx extra installed")


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("r2d2-lstm", "pt2"), pytest.param("ppo-gru", "onnx", marks=ONNX)],
)
def test_the_export_carried_with_state_matches_act_over_a_50_step_episode(
    checkpoints, tmp_path, name, fmt
):
    policy = load_policy(checkpoints[name])
    written = export_policy(policy, fmt, tmp_path / f"policy.{fmt}")
    size = policy.initial_state().shape[0]
    assert written["state"] == {"name": "state", "shape": ["batch", size], "dtype": "float32"}
    assert written["next_state"]["name"] == "next_state" and "mask" not in written
    run = (_pt2 if fmt == "pt2" else _onnx)(written["out"])
    env = gym.make(gym_id(policy.config.collector.env_id), max_episode_steps=1000)
    obs, _ = env.reset(seed=1)
    state = file_state = policy.initial_state()
    for _ in range(50):  # one episode, or the next from zeros where the pole falls earlier
        scores, _ = policy.forward(torch.as_tensor(obs[None]), None, torch.as_tensor(state[None]))
        action, state = policy.act(obs, state=state)
        got, file_state = run(obs[None], file_state[None])
        file_state = file_state[0]
        np.testing.assert_allclose(got[0], scores[0].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(file_state, state, rtol=1e-5, atol=1e-5)
        assert got[0].argmax() == action
        obs, _, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            obs, _ = env.reset()
            state = file_state = policy.initial_state()


def test_a_masked_recurrent_export_takes_observation_state_and_mask(checkpoints, tmp_path):
    policy = load_policy(checkpoints["ppo-gru-masked"], allow_modules=["tests"])
    written = export_policy(policy, "pt2", tmp_path / "masked.pt2")
    assert written["mask"]["shape"] == ["batch", 4] and written["state"]["shape"] == ["batch", 16]
    run = _pt2(written["out"])
    obs = np.ones((3, 2), np.float32)
    mask = np.array([[False, True, True, True]] * 3)
    state = np.random.default_rng(0).uniform(-1, 1, (3, 16)).astype(np.float32)
    scores, next_state = run(obs, state, mask)
    actions, expected_state = policy.act(obs, mask=mask, state=state)
    assert (scores.argmax(-1) == actions).all() and (actions != 0).all()
    np.testing.assert_allclose(next_state, expected_state, rtol=1e-5, atol=1e-5)


def test_a_dict_observation_with_its_mask_takes_and_returns_the_state(checkpoints):
    policy = load_policy(checkpoints["ppo-gru-dict"], allow_modules=["tests"])
    assert policy.structured is not None and policy.recurrent
    env = make_env("tests.action_envs:masked_corridor")
    obs, _ = env.reset(seed=0)
    state, states = policy.initial_state(), []
    for _ in range(4):  # the mask forbids staying (action 1), greedy or sampled
        action, state = policy.act(obs, state=state)
        sampled, _ = policy.act(obs, deterministic=False, state=state)
        assert action != 1 and sampled != 1 and state.shape == (16,)
        states.append(state)
        obs, *_ = env.step(int(action))
    assert not np.allclose(states[0], states[-1])  # the state moved
    assert evaluate_policy(policy, episodes=2, num_envs=2)["episodes"] == 2
