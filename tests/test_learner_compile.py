"""``learner.compile``: refusals, and compiled training equal to eager training, keys unchanged.

The ``eager`` and ``aot_eager`` backends trace with Dynamo (and AOTAutograd) without
generating kernels, so these checks take seconds; inductor is measured by
``python -m services.bench atari --compile``.
"""

import dataclasses

import numpy as np
import pytest
import ray
import torch
import torch._dynamo
import torch._dynamo.utils
from tensordict import TensorDict

from collector.networks.cnn import PixelQSpec
from collector.networks.q_mlp import ModelSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.gpu.check import arrays as random_arrays
from learner.ranks.group import LearnerGroup
from replay.shard import remote_shard
from services.config import ConfigError, load_config
from tests.conftest import ROOT
from tests.test_learner_core import random_batch

MLP = ModelSpec(4, 2, (16, 16))


def captured_graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def pixel_batch(size, seed):
    g = torch.Generator().manual_seed(seed)
    frames = lambda: torch.randint(0, 256, (size, 4, 84, 84), generator=g, dtype=torch.uint8)  # noqa: E731
    return TensorDict(
        {
            "observation": frames(),
            "action": torch.randint(0, 6, (size,), generator=g),
            "reward": torch.randn(size, generator=g),
            "next_observation": frames(),
            "terminated": torch.rand(size, generator=g) < 0.1,
        },
        batch_size=[size],
    )


def trained(spec, batches, **overrides):
    """A core trained on ``batches``: its metrics per step, gradients, and state."""
    torch.manual_seed(0)
    config = LearnerConfig(lr=1e-2, target_update_interval=2, target_update_tau=1.0, **overrides)
    core = LearnerCore(spec, config)
    metrics = [core.train([b]) for b in batches]
    grads = {n: p.grad.clone() for n, p in core.policy_network.named_parameters()}
    return core, metrics, grads


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("learner.compile=fast", "learner.compile: must be one of"),
        ("learner.compile_backend=tvm", "learner.compile_backend: must be one of"),
    ],
)
def test_compile_options_are_refused_naming_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[override])


def test_compile_is_refused_on_a_torch_without_dynamo(monkeypatch):
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    with pytest.raises(ConfigError, match="learner.compile: needs torch.compile.*no Dynamo"):
        load_config(overrides=["learner.compile=default"])
    assert load_config().learner.compile == "off"  # off never asks


@pytest.mark.parametrize(
    ("spec", "make_batch", "backend"),
    [(MLP, random_batch, "aot_eager"), (PixelQSpec(4, 84, 84, 6), pixel_batch, "eager")],
    ids=["mlp", "nature_cnn"],
)
def test_compiled_training_matches_eager_and_keeps_state_keys(spec, make_batch, backend):
    batches = [make_batch(8, seed) for seed in range(3)]
    eager, eager_metrics, eager_grads = trained(spec, batches)
    graphs = captured_graphs()
    compiled, compiled_metrics, compiled_grads = trained(
        spec, batches, compile="default", compile_backend=backend
    )
    assert compiled.compiled and not eager.compiled
    assert captured_graphs() > graphs  # Dynamo traced the network (not silently skipped)
    for got, want in zip(compiled_metrics, eager_metrics, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=1e-6)
    assert compiled_grads.keys() == eager_grads.keys()
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, atol=1e-6, rtol=1e-6)
    state, reference = compiled.state_dict(), eager.state_dict()
    assert list(state["loss"]) == list(reference["loss"])  # no "_orig_mod." anywhere
    assert list(compiled.weights()) == list(eager.weights())
    for key, value in reference["loss"].items():
        torch.testing.assert_close(state["loss"][key], value, atol=1e-6, rtol=1e-6)
    # A compiled core resumes from the eager core's checkpoint (and the reverse).
    compiled.load_state_dict(reference)
    for key, value in compiled.weights().items():
        assert torch.equal(value, eager.weights()[key])


def test_compiled_ranks_under_ddp_match_one_eager_process(ray_cluster):
    shards = [remote_shard("compile", 0, 100, seed=0)]
    config = LearnerConfig(
        world_size=2,
        global_batch_size=32,
        lr=1e-2,
        compile="default",
        compile_backend="eager",
    )
    batches = [random_arrays(32, seed) for seed in (1, 2)]
    group = LearnerGroup("compiled", config, MLP, shards, seed=5)
    try:
        size = 16
        receipt = group.step_on(
            [
                [{k: v[r * size : (r + 1) * size] for k, v in b.items()} for b in batches]
                for r in (0, 1)
            ]
        )
        distributed = group.parameters(1)
        assert all(d["compiled"] and d["ddp"] for d in group.describe())
        states = group.state_dicts()
    finally:
        group.shutdown()
        ray.kill(shards[0])
    torch.manual_seed(5)
    single = LearnerCore(MLP, dataclasses.replace(config, world_size=1, compile="off"))
    metrics = single.train([single.to_batch(b) for b in batches])
    torch.testing.assert_close(
        receipt.metrics["loss_q"], metrics["loss_q"].item(), atol=1e-5, rtol=0
    )
    assert list(distributed) == list(single.weights())
    for name, value in single.weights().items():
        torch.testing.assert_close(distributed[name], value, atol=1e-5, rtol=0)
    assert list(states[0]["loss"]) == list(single.state_dict()["loss"])
    assert np.isfinite(receipt.metrics["grad_norm"])


def test_a_compiled_dqn_run_trains_and_publishes(ray_cluster, tmp_path):
    from services.driver.controller import Controller

    config = load_config(
        ROOT / "deploy" / "configs" / "cartpole_dqn.yaml",
        [
            "metrics.enabled=false",
            f"checkpoint.dir={tmp_path}",
            "checkpoint.at_end=false",
            "controller.total_frames=3000",
            "controller.stop_return=null",
            "learner.compile=default",
            "learner.compile_backend=eager",
        ],
    )
    controller = Controller(config)
    described = []

    def describe_ranks_once(c, receipt):
        if not described:
            described.extend(c.learners.describe())

    controller.register("round", describe_ranks_once)
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    assert described and all(d["compiled"] for d in described)
    assert summary["optim_steps"] == summary["model_version"] > 0
    assert summary["published_version"] == summary["model_version"]
