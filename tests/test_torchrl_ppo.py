"""TorchRL's PPO without glue: ``learner.loss: torchrl:ClipPPOLoss`` (the ``torchrl`` extra)."""

import io

import pytest
import torch
from tensordict import TensorDict

from collector.networks.actor_critic import ActorCriticSpec
from collector.networks.cnn import PixelActorCriticSpec
from learner.config import LearnerConfig
from learner.core import LearnerCore
from learner.losses.ppo import ppo_loss
from learner.losses.torchrl_loss import torchrl_loss
from learner.losses.torchrl_ppo import TorchRLPPOLoss
from learner.options import OnPolicyOptions
from services.config import ConfigError, load_config
from services.driver.controller import Controller

CONFIG = "deploy/configs/cartpole_ppo_torchrl.yaml"


def minibatch(network, n=64, seed=0):
    """An on-policy minibatch as collectors store it, from a slightly older policy."""
    generator = torch.Generator().manual_seed(seed)
    if isinstance(network.spec, PixelActorCriticSpec):
        shape = (n, network.spec.frame_stack, network.spec.height, network.spec.width)
        observation = torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
    else:
        observation = torch.randn(n, network.spec.obs_dim, generator=generator)
    with torch.no_grad():
        out, value = network(observation)
        distribution = network.distribution(out)
        action = distribution.sample()
        log_prob = distribution.log_prob(action)
    # The sampling policy differs from the current one, so ratios leave [1 - eps, 1 + eps].
    return TensorDict(
        {
            "observation": observation,
            "action": action,
            "log_prob": log_prob + 0.3 * torch.randn(n, generator=generator),
            "value": value + 0.3 * torch.randn(n, generator=generator),
            "advantage": torch.randn(n, generator=generator) + 0.5,
            "value_target": value + torch.randn(n, generator=generator),
            "reward": torch.rand(n, generator=generator),
            "terminated": torch.zeros(n, dtype=torch.bool),
        },
        batch_size=[n],
    )


def total_and_grads(loss, network, batch):
    network.zero_grad()
    out = loss(batch)
    total = sum(value for key, value in out.items() if key.startswith("loss_"))
    total.backward()
    grads = [p.grad.clone() for p in network.parameters()]
    return out, total.detach(), grads


def onpolicy_config(options: OnPolicyOptions, loss_options=None) -> LearnerConfig:
    return LearnerConfig(
        loss="torchrl:ClipPPOLoss", onpolicy=options, loss_options=loss_options or {}
    )


MLP = ActorCriticSpec(4, 2, "categorical", (16, 16))
CASES = {
    # the shipped config: TorchRL's names in loss_options, critic_coeff = vf_coef / 2
    "config-file": (MLP, None),
    # learner.onpolicy alone gives TorchRL's defaults: entropy bonus and value clipping on
    "onpolicy-defaults": (
        MLP,
        OnPolicyOptions(ent_coef=0.01, vf_coef=0.7, clip_epsilon=0.1, clip_value_loss=True),
    ),
    "gaussian": (
        ActorCriticSpec(3, 2, "gaussian", (16, 16), log_std_init=-0.5),
        OnPolicyOptions(ent_coef=0.02, normalize_advantage=False),
    ),
    # a shared CNN torso: the actor output is forward()'s first half (collector.networks.cnn)
    "pixels": (PixelActorCriticSpec(4, 36, 36, 6), OnPolicyOptions(ent_coef=0.01)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_torchrls_clip_ppo_loss_and_gradients_equal_relayrls_ppo_loss(case):
    spec, options = CASES[case]
    config = load_config(CONFIG).learner if options is None else onpolicy_config(options)
    torch.manual_seed(0)
    network = spec.build()
    batch = minibatch(network, n=32 if case == "pixels" else 64)
    theirs = torchrl_loss(network, config)
    assert isinstance(theirs, TorchRLPPOLoss)
    got, got_total, got_grads = total_and_grads(theirs, network, batch)
    expected, expected_total, expected_grads = total_and_grads(
        ppo_loss(network, config), network, batch
    )
    for key in ("loss_objective", "loss_critic", "loss_entropy", "clip_fraction", "entropy"):
        torch.testing.assert_close(got[key], expected[key], msg=key)
    assert 0 < float(got["clip_fraction"]) < 1  # the batch exercises clipping
    torch.testing.assert_close(got_total, expected_total)
    for got_grad, expected_grad in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(got_grad, expected_grad)
    assert all(g.abs().sum() > 0 for g in got_grads)  # every parameter of the published net


def test_loss_options_override_learner_onpolicy_in_torchrls_names():
    torch.manual_seed(0)
    network = ActorCriticSpec(4, 2, hidden_sizes=(16, 16)).build()
    batch = minibatch(network)
    options = OnPolicyOptions(ent_coef=0.01)
    base = torchrl_loss(network, onpolicy_config(options))(batch)
    override = {"entropy_coeff": 0.05, "critic_coeff": 1.0}
    tuned = torchrl_loss(network, onpolicy_config(options, override))(batch)
    torch.testing.assert_close(tuned["loss_entropy"], -0.05 * base["entropy"])
    torch.testing.assert_close(tuned["loss_critic"], 4 * base["loss_critic"])  # vf_coef / 2
    # TorchRL's diagnostics come back as 0-d metrics the learner averages and logs
    assert {"clip_fraction", "entropy", "kl_approx", "ESS", "explained_variance"} <= set(
        base.keys()
    )
    assert all(value.ndim == 0 for value in base.values())


def test_the_batch_is_mapped_to_the_losss_keys():
    torch.manual_seed(0)
    network = ActorCriticSpec(4, 2, hidden_sizes=(8,)).build()
    loss = torchrl_loss(network, onpolicy_config(OnPolicyOptions()))
    batch = minibatch(network, n=8)
    mapped = loss.to_torchrl(batch)
    keys = loss.loss.tensor_keys  # TorchRL 0.14 names the old log-prob "action_log_prob"
    assert torch.equal(mapped[keys.sample_log_prob], batch["log_prob"])
    for ours, theirs in [("advantage", keys.advantage), ("value_target", keys.value_target)]:
        assert mapped[theirs].shape == (8, 1) and torch.equal(mapped[theirs][:, 0], batch[ours])
    assert torch.equal(mapped[keys.value][:, 0], batch["value"])
    assert mapped[keys.action].dtype == torch.int64


def test_the_learners_state_round_trips_and_training_continues_identically():
    config = load_config(CONFIG)
    spec = ActorCriticSpec(4, 2, hidden_sizes=(16, 16))
    torch.manual_seed(0)
    core = LearnerCore(spec, config.learner)
    batch = minibatch(core.policy_network)
    core.train([batch])
    buffer = io.BytesIO()
    torch.save(core.state_dict(), buffer)  # TorchRL's parameters and coefficient buffers
    buffer.seek(0)
    torch.manual_seed(1)
    restored = LearnerCore(spec, config.learner)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    first, second = core.train([batch]), restored.train([batch])
    torch.testing.assert_close(first["loss_objective"], second["loss_objective"], rtol=0, atol=0)
    for name, weight in core.weights().items():
        assert torch.equal(weight, restored.weights()[name]), name


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["learner.loss=torchrl:DQNLoss"], "learner.loss: torchrl:DQNLoss trains algorithm dqn"),
        (["learner.loss=torchrl:KLPENPPOLoss"], "learner.loss: torchrl:KLPENPPOLoss: "),
        (
            ["algorithm=dqn", "replay.sampler=uniform", "collector.n_step=1"],
            "learner.loss: torchrl:ClipPPOLoss trains algorithm ppo, the run's algorithm is dqn",
        ),
        # TorchRL's PPO losses swallow unknown keywords; relayrl refuses a misspelled option
        (
            ['learner.loss_options={"entropy_coef": 0.01}'],
            "learner.loss_options: torchrl:ClipPPOLoss takes no option 'entropy_coef'",
        ),
    ],
)
def test_a_torchrl_loss_or_option_that_cannot_train_the_run_is_refused(overrides, message):
    with pytest.raises(ConfigError) as refused:
        load_config(CONFIG, overrides)
    assert str(refused.value).startswith(message)


@pytest.mark.slow
def test_the_one_line_config_trains_cartpole_with_torchrls_clip_ppo_loss(ray_cluster, tmp_path):
    # The CLI's controller on the session's Ray (a CLI subprocess would start its own Ray,
    # about 30 s more on a loaded machine); the CLI itself is what tests/test_torchrl_loss.py
    # runs for torchrl:DQNLoss.
    frames = 15_360  # 30 iterations of 512
    config = load_config(
        CONFIG,
        [
            f"controller.total_frames={frames}",
            "controller.stop_return=null",
            "metrics.enabled=false",
            f"run.dir={tmp_path}",
            "checkpoint.at_end=false",
        ],
    )
    controller = Controller(config)
    rounds = []
    controller.register("round", lambda c, r: rounds.append(r))
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    assert summary["frames"] == frames and summary["optim_steps"] == 30 * 20 * 2
    assert all(r.metrics["policy_lag_max"] == 0 for r in rounds)  # lockstep, as relayrl's PPO
    # TorchRL's diagnostics reach the learner metrics
    assert {"loss_objective", "loss_critic", "clip_fraction", "entropy", "kl_approx"} <= set(
        rounds[-1].metrics
    )
    # Random play averages about 22; CLI runs of this config measured 164 at 12 k frames and
    # 199-445 at 20 k (relayrl's own PPO: 178-410), so 100 leaves room for noise.
    assert summary["episode_return_mean"] > 100, summary
