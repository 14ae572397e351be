"""load_policy, Policy.act and export on checkpoints written by a learner core (no Ray).

Each checkpoint holds a ``LearnerCore``'s state with perturbed weights (so loading cannot pass by
initialization luck), written through the real checkpoint store. Exported files are loaded back
in a clean interpreter that cannot import relayrl.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from learner.core import LearnerCore
from replay.persist.npyio import CheckpointError
from services.checkpoints.store import CheckpointStore, write_json
from services.config import load_config
from services.config.spec import env_spaces, model_spec_for
from services.policy import Policy, load_policy
from services.policy.export import example_observations, export_policy
from tests.conftest import ROOT

CONFIGS = ROOT / "deploy" / "configs"
EXAMPLES = "tests.network_examples"
ALLOW = ["tests"]  # the users' networks of these cases (services.checkpoints.trust)
SPREAD = CONFIGS / "spread_qmix.yaml"

# id -> (config file or None, overrides)
CASES = {
    "dqn": (None, []),
    "dqn-dueling": (None, ["learner.dueling=true"]),
    "ppo": (CONFIGS / "cartpole_ppo.yaml", []),
    "appo": (CONFIGS / "cartpole_appo.yaml", []),  # the asynchronous loop's: an old policy too
    "ppo-gaussian": (None, ["algorithm=ppo", "collector.env_id=Pendulum-v1"]),
    "sac": (CONFIGS / "pendulum_sac.yaml", []),
    "qmix": (SPREAD, ["learner.marl.prev_action=true"]),
    "dqn-user": (None, [f"learner.network={EXAMPLES}:residual_q_network"]),
    "ppo-user": (
        CONFIGS / "cartpole_ppo.yaml",
        [f"learner.network={EXAMPLES}:shared_torso_actor_critic"],
    ),
    "sac-user": (CONFIGS / "pendulum_sac.yaml", [f"learner.network={EXAMPLES}:sac_actor"]),
    "qmix-user": (SPREAD, [f"learner.network={EXAMPLES}:agent_q_network"]),
    "pong": (CONFIGS / "pong_dqn.yaml", ["replay.mmap_dir=/tmp/unused", "learner.dueling=false"]),
}


def write_checkpoint(root, config_file, overrides, *, seed=0):
    """A checkpoint of a learner core whose policy weights were moved off their initial values."""
    config = load_config(config_file, overrides)
    spec = model_spec_for(config, env_spaces(config))
    torch.manual_seed(seed)
    core = LearnerCore(spec, config.learner)
    with torch.no_grad():
        for parameter in core.policy_network.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    core.version = 123
    store = CheckpointStore(root)
    staging = store.stage(frames=1000)
    torch.save(
        {**core.state_dict(), "meta": {"rank": 0, "world_size": 1}}, staging / "learner-0.pt"
    )
    write_json(staging / "config.json", config.to_dict())
    store.commit(staging, config_digest=config.digest(), counters={})
    return core


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Every case's checkpoint: ``id -> (rotation dir, learner core)``."""
    out = {}
    for name, (config_file, overrides) in CASES.items():
        root = tmp_path_factory.mktemp(name) / "checkpoints"
        out[name] = (root, write_checkpoint(root, config_file, overrides))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_load_policy_gives_the_trained_network_and_its_greedy_actions(checkpoints, name):
    root, core = checkpoints[name]
    policy = load_policy(
        root.parent, allow_modules=ALLOW
    )  # a run directory: its checkpoints/ rotation
    assert isinstance(policy, Policy) and policy.version == 123
    assert policy.checkpoint.parent == root.resolve()
    trained = core.policy_network.state_dict()
    loaded = policy.network.state_dict()
    assert trained.keys() == loaded.keys()
    assert all(torch.equal(trained[k], loaded[k]) for k in trained)
    assert not policy.network.training
    batch = example_observations(policy, batch=5)
    actions = policy.act(batch.numpy())
    assert isinstance(actions, np.ndarray) and len(actions) == 5
    single = policy.act(batch[0].numpy())  # a batch of one: equal up to float rounding
    np.testing.assert_allclose(single, actions[0], atol=1e-5)
    as_torch = policy.act(batch)
    assert isinstance(as_torch, torch.Tensor)
    np.testing.assert_array_equal(as_torch.numpy(), actions)
    # the greedy actions are the head's: argmax of Q-values or logits, or the action itself
    with torch.no_grad():
        if policy.family in ("q", "agents"):
            q = core.policy_network(batch)
            np.testing.assert_array_equal(actions, q.argmax(-1).numpy())
        elif policy.family == "squashed":
            np.testing.assert_allclose(actions, core.policy_network.mode(batch).numpy(), atol=1e-6)
            space = policy.action_space
            assert (actions >= space.low - 1e-6).all() and (actions <= space.high + 1e-6).all()
    sampled = policy.act(batch.numpy(), deterministic=False)
    assert sampled.shape == actions.shape


def test_a_pixel_policy_stacks_single_frames(checkpoints):
    policy = load_policy(checkpoints["pong"][0], allow_modules=ALLOW)
    assert policy.observation_shape == (4, 84, 84) and policy.dtype == torch.uint8
    frames = np.random.default_rng(0).integers(0, 256, size=(5, 84, 84), dtype=np.uint8)
    first = policy.act(frames[0])  # the stack repeats the first frame of the episode
    assert first == policy.act(np.repeat(frames[:1], 4, axis=0))
    for frame in frames[1:]:
        last = policy.act(frame)
    assert last == policy.act(frames[1:5])
    policy.reset()
    assert policy.act(frames[0]) == first


def test_a_multi_agent_policy_keeps_the_previous_actions_between_steps(checkpoints):
    policy = load_policy(checkpoints["qmix"][0], allow_modules=ALLOW)
    features = policy.agents
    assert features.prev_action and features.width == features.obs_dim + features.num_actions
    obs = np.random.default_rng(1).normal(size=(3, features.obs_dim)).astype(np.float32)
    first = policy.act(obs)
    assert first.shape == (3,)
    zeros = np.concatenate([obs, np.zeros((3, features.num_actions), np.float32)], axis=1)
    np.testing.assert_array_equal(first, policy.act({"observation": zeros[None]})[0])
    second = policy.act(obs)  # now with the one-hot of `first`
    one_hot = np.eye(features.num_actions, dtype=np.float32)[first]
    expected = policy.act(np.concatenate([obs, one_hot], axis=1)[None])[0]
    np.testing.assert_array_equal(second, expected)


def test_wrong_observations_are_refused_naming_the_shape(checkpoints):
    policy = load_policy(checkpoints["dqn"][0])
    with pytest.raises(ValueError, match=r"expected \[4\] or \[B, 4\], got \[2, 5\]"):
        policy.act(np.zeros((2, 5), np.float32))


def test_a_corrupt_checkpoint_is_refused_naming_the_file(tmp_path):
    root = tmp_path / "checkpoints"
    write_checkpoint(root, None, [])
    learner = next(root.glob("ckpt-*")) / "learner-0.pt"
    learner.write_bytes(learner.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="learner-0.pt"):
        load_policy(tmp_path)


# Loads each exported file with torch or onnxruntime alone and compares it with the policy.
CHECK = r"""
import json
import numpy as np, onnxruntime, torch


def check(cases):
    for case in cases:
        data = np.load(case["npz"])
        obs = data["observation"]
        if case["format"] == "pt2":
            out = torch.export.load(case["file"]).module()(torch.as_tensor(obs)).detach().numpy()
        else:
            session = onnxruntime.InferenceSession(case["file"], providers=["CPUExecutionProvider"])
            out = session.run(None, {"observation": obs})[0]
        assert np.allclose(out, data["expected"], rtol=1e-5, atol=1e-5), case
        actions = out.argmax(-1) if case["discrete"] else out
        assert np.allclose(actions, data["actions"], atol=1e-5), case
    return len(cases)
"""

# A clean interpreter first: no relayrl on sys.path, no editable finder.
ISOLATED = (
    r"""
import importlib.util, json, pathlib, sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path[:] = [p for p in sys.path if not (pathlib.Path(p or ".") / "services" / "cli.py").exists()]
for name in ("services", "collector", "learner", "replay"):
    assert importlib.util.find_spec(name) is None, name
"""
    + CHECK
    + r"""
print(json.dumps({"checked": check(json.loads(sys.argv[1])), "relayrl_importable": False}))
"""
)


def run_isolated(cases: list[dict], cwd) -> dict:
    """Runs the exported files in a clean interpreter; returns its JSON line."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    result = subprocess.run(
        [sys.executable, "-I", "-c", ISOLATED, json.dumps(cases)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def check_files(cases: list[dict]) -> int:
    """The same check in this process (the clean interpreter's is :func:`run_isolated`)."""
    namespace: dict = {}
    exec(CHECK, namespace)
    return namespace["check"](cases)


def export_case(policy, fmt, out_dir, name, batch=6) -> dict:
    """Exports ``policy`` and saves the observations, its head's output and its actions."""
    written = export_policy(policy, fmt, out_dir / f"{name}.{fmt}")
    assert written["bytes"] > 0  # and its output is within 1e-5 of the policy's
    obs = example_observations(policy, batch=batch, seed=7)  # another batch size than traced
    npz = out_dir / f"{name}-{fmt}.npz"
    np.savez(
        npz,
        observation=obs.numpy(),
        expected=policy.forward(obs).numpy(),
        actions=np.asarray(policy.act(obs.numpy()), dtype=np.float64),
    )
    return {"file": written["out"], "npz": str(npz), "format": fmt, "discrete": written["discrete"]}


def test_exported_files_run_without_relayrl_and_match_act(checkpoints, tmp_path):
    # every family through torch.export, users' networks too
    formats = {"dqn": ("onnx",), "ppo-gaussian": ("pt2",), "qmix": ("pt2",), "pong": ("pt2",)}
    formats |= {"sac-user": ("pt2",), "ppo-user": ("onnx",), "appo": ("onnx",)}
    cases = [
        export_case(load_policy(checkpoints[name][0], allow_modules=ALLOW), fmt, tmp_path, name)
        for name, fmts in formats.items()
        for fmt in fmts
    ]
    assert run_isolated(cases, tmp_path) == {"checked": len(cases), "relayrl_importable": False}
