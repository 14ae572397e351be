"""The pure learner core: steppers, accumulation, guards, targets, schedulers, state (no Ray)."""

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from collector.networks.q_mlp import ModelSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.delayed import DelayedPolicyStepper
from learner.precision import MixedPrecisionStepper
from learner.stepper import DefaultStepper
from learner.weights import WeightSchemaError, check_schema, spec_schema, tensor_schema

SPEC = ModelSpec(4, 2, (16, 16))


# The learning-rule defaults these tests were written against (the run defaults may move).
PINNED = {"lr": 1e-3, "target_update_interval": 200, "target_update_tau": 1.0}


def make_core(seed=0, spec=SPEC, **overrides):
    torch.manual_seed(seed)
    return LearnerCore(spec, LearnerConfig(**{**PINNED, **overrides}))


def random_batch(size, seed, *, shard=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "observation": torch.randn(size, 4, generator=g),
            "action": torch.randint(0, 2, (size,), generator=g),
            "reward": torch.randn(size, generator=g),
            "next_observation": torch.randn(size, 4, generator=g),
            "terminated": torch.rand(size, generator=g) < 0.1,
            "shard": torch.full((size,), shard),
            "index": torch.arange(size),
            "insertion_id": torch.arange(size) + 100,
        },
        batch_size=[size],
    )


def params(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def assert_params_close(a, b, atol=0.0):
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0)


def test_auto_stepper_resolves_from_precision_and_accumulation():
    assert isinstance(make_core().stepper, DefaultStepper)
    assert not isinstance(make_core().stepper, MixedPrecisionStepper)
    assert isinstance(make_core(precision="bf16").stepper, MixedPrecisionStepper)
    assert isinstance(make_core(grad_accumulation=2).stepper, MixedPrecisionStepper)


def test_gradient_accumulation_of_k_micro_batches_equals_one_k_times_batch():
    plain = make_core(seed=1, lr=1e-2)
    accumulated = make_core(seed=1, lr=1e-2, grad_accumulation=4)
    assert_params_close(params(plain.loss_module), params(accumulated.loss_module))
    for step in range(3):
        batch = random_batch(64, seed=step)
        out_plain = plain.train([batch])
        out_accumulated = accumulated.train([batch])
        torch.testing.assert_close(out_accumulated["loss_q"], out_plain["loss_q"])
        torch.testing.assert_close(out_accumulated["grad_norm"], out_plain["grad_norm"])
    moved = params(plain.policy_network)
    assert_params_close(params(accumulated.loss_module), params(plain.loss_module), atol=1e-6)
    assert any(not torch.equal(moved[k], v) for k, v in params(make_core(1).policy_network).items())


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_runs_and_its_guard_skips_a_poisoned_step(precision):
    core = make_core(seed=2, precision=precision, lr=1e-2)
    stepper = core.stepper
    start = params(core.loss_module)
    metrics = core.train([random_batch(32, seed=s) for s in range(3)])
    assert metrics["nonfinite_skipped"].item() == 0
    assert torch.isfinite(metrics["loss_q"])
    trained = params(core.loss_module)
    assert any(not torch.equal(trained[k], start[k]) for k in start)
    optimizer_steps = stepper.optimizer.state_dict()["state"][0]["step"].item()

    poisoned = random_batch(32, seed=9)
    poisoned["reward"][5] = float("inf")
    metrics = core.train([poisoned])
    assert metrics["nonfinite_skipped"].item() == 1
    assert stepper.skipped_steps == 1
    assert core.version == 4  # a skipped step still counts as asked
    assert_params_close(params(core.loss_module), trained)
    assert stepper.optimizer.state_dict()["state"][0]["step"].item() == optimizer_steps

    metrics = core.train([random_batch(32, seed=10)])
    assert metrics["nonfinite_skipped"].item() == 0
    assert any(not torch.equal(v, trained[k]) for k, v in params(core.loss_module).items())


def test_hard_target_update_every_n_steps():
    core = make_core(seed=3, target_update_interval=3, target_update_tau=1.0, lr=1e-2)
    loss = core.loss_module
    initial_target = params(loss.target_network)
    core.train([random_batch(16, seed=s) for s in range(2)])
    assert_params_close(params(loss.target_network), initial_target)
    assert any(not torch.equal(v, initial_target[k]) for k, v in params(loss.value_network).items())
    core.train([random_batch(16, seed=2)])
    assert_params_close(params(loss.target_network), params(loss.value_network))
    core.train([random_batch(16, seed=3)])
    assert not all(
        torch.equal(v, params(loss.value_network)[k])
        for k, v in params(loss.target_network).items()
    )


def test_soft_target_update_every_step():
    core = make_core(seed=4, target_update_interval=1, target_update_tau=0.1, lr=1e-2)
    loss = core.loss_module
    for step in range(2):
        before = params(loss.target_network)
        core.train([random_batch(16, seed=step)])
        online = params(loss.value_network)
        for key, value in params(loss.target_network).items():
            torch.testing.assert_close(value, before[key] + 0.1 * (online[key] - before[key]))
            assert not torch.equal(value, online[key])


@pytest.mark.parametrize("mode", ["norm", "value"])
def test_clipping_bounds_the_update_and_reports_the_unclipped_norm(mode):
    limit = 1e-3
    core = make_core(
        seed=5,
        optimizer="sgd",
        lr=1.0,
        grad_clip=mode,
        max_grad_norm=limit,
        max_grad_value=limit,
    )
    before = params(core.policy_network)
    metrics = core.train([random_batch(32, seed=0)])
    assert metrics["grad_norm"].item() > 10 * limit
    deltas = [v - before[k] for k, v in params(core.policy_network).items()]
    if mode == "norm":
        total = torch.linalg.vector_norm(torch.cat([d.flatten() for d in deltas]))
        assert 0 < total.item() <= limit * 1.0001
    else:
        largest = max(d.abs().max().item() for d in deltas)
        assert largest == pytest.approx(limit, rel=1e-4)


def test_linear_lr_schedule_with_warmup():
    core = make_core(lr_scheduler="linear", lr_warmup_steps=2, lr_decay_steps=4, lr=1.0)
    lrs = [core.train([random_batch(8, seed=s)])["lr"].item() for s in range(8)]
    assert lrs == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0])


def test_priorities_follow_the_td_error_of_each_item():
    core = make_core(update_priorities=True)
    batches = [random_batch(8, seed=0, shard=1), random_batch(8, seed=1, shard=0)]
    core.train(batches)
    keys, priority = core.take_priorities()
    assert keys["shard"].tolist() == [1] * 8 + [0] * 8
    assert keys["index"].tolist() == list(range(8)) * 2
    assert keys["insertion_id"].tolist() == list(range(100, 108)) * 2
    assert priority.shape == (16,) and (priority >= 0).all() and priority.max() > 0
    assert core.take_priorities() is None


@pytest.mark.parametrize(
    "overrides",
    [
        {"precision": "bf16", "lr_scheduler": "cosine", "lr_decay_steps": 10},
        {"precision": "fp16", "grad_accumulation": 2},
        {"optimizer": "adamw", "weight_decay": 0.01},
    ],
)
def test_state_round_trip_resumes_identical_parameters_and_optimizer(overrides):
    original = make_core(seed=6, **overrides)
    original.train([random_batch(32, seed=s) for s in range(3)])
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)

    restored = make_core(seed=99, **overrides)
    restored.load_state_dict(state)
    assert restored.version == original.version == 3
    assert_params_close(params(restored.loss_module), params(original.loss_module))
    saved_optimizer = original.stepper.state_dict()
    assert restored.stepper.state_dict().keys() == saved_optimizer.keys()
    for key, value in original.stepper.optimizer.state_dict()["state"][0].items():
        torch.testing.assert_close(restored.stepper.optimizer.state_dict()["state"][0][key], value)
    assert torch.equal(torch.get_rng_state(), state["rng"]["torch"])

    for s in range(3, 5):
        original.train([random_batch(32, seed=s)])
        restored.train([random_batch(32, seed=s)])
    assert_params_close(params(restored.loss_module), params(original.loss_module))


def test_state_of_another_format_is_refused():
    core = make_core()
    state = core.state_dict()
    state["format"] = 0
    with pytest.raises(ValueError, match="format"):
        core.load_state_dict(state)


class ToyActorCritic(nn.Module):
    """A deterministic actor-critic loss with named methods (TD3's shape, without noise)."""

    def __init__(self, actor, config):
        super().__init__()
        self.actor = actor
        self.critic = nn.Linear(4, 1)

    def actor_parameters(self):
        return self.actor.parameters()

    def critic_parameters(self):
        return self.critic.parameters()

    def loss_critic(self, batch):
        inputs = torch.cat([batch["observation"], batch["action_value"]], dim=-1)
        q = self.critic(inputs).squeeze(-1)
        return TensorDict({"loss_critic": F.mse_loss(q, batch["reward"])}, [])

    def loss_actor(self, batch):
        inputs = torch.cat([batch["observation"], self.actor(batch["observation"])], dim=-1)
        return TensorDict({"loss_actor": -self.critic(inputs).mean()}, [])

    def forward(self, batch):
        return TensorDict({**self.loss_critic(batch), **self.loss_actor(batch)}, [])


def continuous_batch(seed):
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "observation": torch.randn(16, 3, generator=g),
            "action_value": torch.randn(16, 1, generator=g),
            "reward": torch.randn(16, generator=g),
        },
        [16],
    )


def test_delayed_policy_stepper_updates_the_actor_every_other_step():
    torch.manual_seed(7)
    config = LearnerConfig(stepper="delayed_policy", stepper_options={"policy_delay": 2}, lr=1e-2)
    core = LearnerCore(ModelSpec(3, 1, (8,)), config, loss_factory=ToyActorCritic)
    assert isinstance(core.stepper, DelayedPolicyStepper)
    actor_changed, critic_changed = [], []
    for step in range(4):
        actor_before = params(core.loss_module.actor)
        critic_before = params(core.loss_module.critic)
        metrics = core.train([continuous_batch(step)])
        actor_after, critic_after = params(core.loss_module.actor), params(core.loss_module.critic)
        actor_changed.append(
            any(not torch.equal(actor_after[k], v) for k, v in actor_before.items())
        )
        critic_changed.append(
            any(not torch.equal(critic_after[k], v) for k, v in critic_before.items())
        )
        assert metrics["actor_updated"].item() == float(step % 2 == 0)
        assert ("loss_actor" in metrics) == (step % 2 == 0)
    assert actor_changed == [True, False, True, False]
    assert critic_changed == [True] * 4
    state = core.state_dict()["stepper"]
    assert state["updates"] == 4 and {"critic_optimizer", "actor_optimizer"} <= state.keys()


def test_loss_named_by_path_and_bad_paths_refused():
    core = LearnerCore(SPEC, LearnerConfig(loss="learner.losses.dqn:dqn_loss"))
    assert core.train([random_batch(8, seed=0)])["loss_q"] > 0
    with pytest.raises(ValueError, match="loss: cannot import module 'no_such_module'"):
        LearnerCore(SPEC, LearnerConfig(loss="no_such_module:make"))
    with pytest.raises(ValueError, match=r"stepper: 'learner\.loss' has no attribute 'nope'"):
        LearnerCore(SPEC, LearnerConfig(stepper="learner.loss:nope"))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"precision": "fp8"}, "precision"),
        ({"grad_accumulation": 3}, "grad_accumulation"),
        ({"stepper": "default", "precision": "bf16"}, "stepper"),
        ({"loss": "not a path"}, "loss"),
        ({"grad_clip": "both"}, "grad_clip"),
        ({"lr_scheduler": "cosine"}, "lr_decay_steps"),
        ({"backend": "nccl", "resources_per_rank": {"CPU": 1, "GPU": 0.5}}, "resources_per_rank"),
        ({"rendezvous_attempts": 0}, "rendezvous_attempts"),
        ({"command_timeout_s": 0}, "command_timeout_s"),
    ],
)
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        LearnerConfig(**overrides)


def test_gpu_config_selects_nccl_and_fractional_gpu_is_refused_for_nccl():
    config = LearnerConfig(resources_per_rank={"CPU": 2, "GPU": 1})
    assert config.uses_gpu and config.resolved_backend == "nccl"
    assert LearnerConfig().resolved_backend == "gloo"
    with pytest.raises(ValueError, match="resources_per_rank"):
        LearnerConfig(resources_per_rank={"CPU": 1, "GPU": 0.5})


def test_schema_check_names_the_mismatched_tensors():
    expected = spec_schema(SPEC)
    assert expected == tensor_schema(SPEC.build().state_dict())
    check_schema(tensor_schema(make_core().weights()), expected)
    other = tensor_schema(ModelSpec(4, 2, (16, 8)).build().state_dict())
    with pytest.raises(WeightSchemaError, match=r"2\.weight: learner \(8, 16\) float32"):
        check_schema(other, expected)
    half = {k: (shape, "float16") for k, (shape, _) in expected.items()}
    with pytest.raises(WeightSchemaError, match="float16 vs collectors"):
        check_schema(half, expected)
    with pytest.raises(WeightSchemaError, match=r"missing \['4.bias'\]"):
        check_schema({k: v for k, v in expected.items() if k != "4.bias"}, expected)


def test_to_batch_casts_observations_and_keeps_integer_keys():
    core = make_core()
    batch = core.to_batch(
        {
            "observation": np.zeros((3, 4), np.float64),
            "action": np.array([0, 1, 1]),
            "index": np.array([4, 5, 6]),
        }
    )
    assert batch["observation"].dtype == torch.float32
    assert batch["index"].dtype == torch.int64 and batch.batch_size == torch.Size([3])


def test_run_config_overrides_reach_the_new_learner_fields():
    from services.config import ConfigError, load_config

    config = load_config(
        overrides=[
            "learner.precision=bf16",
            "learner.grad_accumulation=2",
            "learner.stepper_options={policy_delay: 3}",
            "learner.lr_scheduler=cosine",
            "learner.lr_decay_steps=1000",
            "learner.command_timeout_s=30",
        ]
    ).learner
    assert config.resolved_stepper == "mixed_precision"
    assert config.stepper_options == {"policy_delay": 3}
    assert config.command_timeout_s == 30.0
    with pytest.raises(ConfigError, match=r"^learner\.precision: must be one of"):
        load_config(overrides=["learner.precision=fp64"])


@pytest.mark.parametrize("schedule", ["none", "linear"])
def test_a_restored_stepper_runs_at_the_configured_lr_not_the_saved_one(schedule):
    from learner.multi import MultiOptimizerStepper

    net = nn.Linear(3, 1)
    old = LearnerConfig(lr=1e-3, lr_scheduler=schedule, lr_warmup_steps=0, lr_decay_steps=10)
    new = LearnerConfig(lr=4e-3, lr_scheduler=schedule, lr_warmup_steps=0, lr_decay_steps=10)
    stepper = DefaultStepper.from_config(net, old)
    for _ in range(5):  # half-way down a linear decay
        stepper.optimizer.step()
        if stepper.scheduler is not None:
            stepper.scheduler.step()
    saved = stepper.state_dict()
    factor = stepper.optimizer.param_groups[0]["lr"] / 1e-3
    restored = DefaultStepper.from_config(net, new)
    restored.load_state_dict(saved)
    assert restored.optimizer.param_groups[0]["lr"] == pytest.approx(4e-3 * factor)
    if restored.scheduler is not None:  # the schedule goes on from the new base
        restored.optimizer.step()
        restored.scheduler.step()
        assert restored.scheduler.base_lrs == [4e-3]
    multi = MultiOptimizerStepper([("loss", torch.optim.Adam(net.parameters(), lr=2e-3))])
    multi.load_state_dict(
        {"optimizers": {"loss": torch.optim.Adam(net.parameters(), lr=1e-3).state_dict()}}
    )
    assert multi.groups[0][1].param_groups[0]["lr"] == 2e-3
