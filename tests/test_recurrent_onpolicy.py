"""Recurrent on-policy collection and losses: state per env, sequences, padding (no Ray)."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collector.config import OnPolicyTransform
from collector.envs.spaces import describe
from collector.envs.vector import make_vector_env
from collector.networks.recurrent import RecurrentActorCriticSpec
from collector.onpolicy import OnPolicyWorker
from collector.sequences import to_sequences
from learner.losses.a2c import A2CLoss
from learner.losses.common import evaluate_steps
from learner.losses.ppo import PPOLoss
from learner.losses.reinforce import ReinforceLoss

ENV = "relayrl:StatelessCartPole-v1"


def make_worker(kind="lstm", num_envs=3, length=0, transform_kind="gae", **env_kwargs):
    envs = make_vector_env(ENV, num_envs, env_kwargs=env_kwargs, autoreset="same_step")
    spec = RecurrentActorCriticSpec(
        describe(envs.single_observation_space), (8,), kind, 8, action_dim=2
    )
    torch.manual_seed(0)
    network = spec.build()
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    transform = OnPolicyTransform(transform_kind, sequence_length=length)
    return OnPolicyWorker(envs, policy, list(range(num_envs)), transform), network, spec


def as_batch(transitions):
    tensors = {key: torch.as_tensor(value) for key, value in transitions.items()}
    return TensorDict(tensors, batch_size=[len(transitions["valid"])])


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_sequences_replayed_from_their_stored_state_reproduce_the_collector(kind):
    worker, network, _ = make_worker(kind, length=8)
    for _ in range(3):  # episodes end and start inside sequences; states carry across rollouts
        batch = worker.rollout(num_steps=32, explore={}, policy_version=0)
        items = batch.transitions
        assert items["observation"].shape == (3 * 32 // 8, 8, 2)
        assert items["recurrent_state"].shape == (12, 16 if kind == "lstm" else 8)
        assert batch.frames == 96 == items["valid"].sum()
        log_prob, _, value, steps = evaluate_steps(network, as_batch(items))
        torch.testing.assert_close(log_prob, steps["log_prob"], atol=1e-5, rtol=0)
        torch.testing.assert_close(value, steps["value"], atol=1e-5, rtol=0)
    assert items["reset"].any()  # some episode started inside the last rollout


def test_the_state_is_zero_exactly_where_an_episode_starts():
    worker, _, _ = make_worker(length=1)  # one-step sequences: every step's state is stored
    first = worker.rollout(num_steps=40, explore={}, policy_version=0).transitions
    second = worker.rollout(num_steps=40, explore={}, policy_version=0).transitions
    for items in (first, second):
        reset, state = items["reset"][:, 0], items["recurrent_state"]
        done = items["terminated"][:, 0] | items["truncated"][:, 0]
        starts = np.zeros_like(reset)  # items are env-major: env e's steps are rows e*40..
        starts.reshape(3, 40)[:, 1:] = done.reshape(3, 40)[:, :-1]
        if items is first:
            starts.reshape(3, 40)[:, 0] = True  # after reset()
        else:  # an episode ended on the previous rollout's last step
            starts.reshape(3, 40)[:, 0] = (
                first["terminated"][:, 0].reshape(3, 40)[:, -1]
                | (first["truncated"][:, 0].reshape(3, 40)[:, -1])
            )
        np.testing.assert_array_equal(reset, starts)
        assert reset[1:].any() and not reset.all()
        assert (state[reset] == 0).all()
        assert (np.abs(state[~reset]).sum(axis=1) > 0).all()


def test_the_state_survives_a_weights_update_mid_episode():
    worker, network, spec = make_worker(length=0)
    worker.rollout(num_steps=5, explore={}, policy_version=0)  # CartPole: no episode ends in 5
    carried = worker.state.copy()
    assert (np.abs(carried).sum(axis=1) > 0).all()
    torch.manual_seed(1)
    network.load_state_dict(spec.build().state_dict())  # as collector.weights applies weights
    items = worker.rollout(num_steps=5, explore={}, policy_version=1).transitions
    np.testing.assert_array_equal(items["recurrent_state"], carried)
    assert not items["reset"][:, 0].any()


def test_a_reset_restarts_every_env_with_fresh_state():
    worker, _, _ = make_worker(length=0)
    worker.rollout(num_steps=5, explore={}, policy_version=0)
    worker.reset([7, 8, 9])  # what a restored collector does (Collector.load_state_dict)
    items = worker.rollout(num_steps=5, explore={}, policy_version=0).transitions
    assert items["reset"][:, 0].all() and (items["recurrent_state"] == 0).all()


def test_the_rollouts_last_value_bootstraps_from_the_current_state():
    worker, _, _ = make_worker(length=0)
    items = worker.rollout(num_steps=6, explore={}, policy_version=0).transitions
    gamma, last = 0.99, worker.policy.value(worker.obs, worker.state * ~worker.starting[:, None])
    open_ = ~(items["terminated"][:, -1] | items["truncated"][:, -1])
    expected = items["reward"][:, -1] + gamma * last - items["value"][:, -1]
    np.testing.assert_allclose(items["advantage"][open_, -1], expected[open_], atol=1e-5)
    zero = worker.policy.value(worker.obs, np.zeros_like(worker.state))
    assert not np.allclose(zero[open_], last[open_])  # the state matters


def padded_pair():
    """Two sequences padded to 5 steps, and the same 8 real steps as one unpadded row.

    The second sequence starts an episode (state zeros, ``reset`` at its first step), so laid
    after the first with a reset flag it is the same computation without padding.
    """
    torch.manual_seed(3)
    _, network, _ = make_worker(length=0)
    obs = torch.randn(2, 5, 2)
    obs[1, 3:] = 1e3  # padding: garbage that must not matter
    state = torch.stack([torch.randn(16), torch.zeros(16)])
    reset = torch.zeros(2, 5, dtype=torch.bool)
    reset[1, 0] = True
    valid = torch.ones(2, 5, dtype=torch.bool)
    valid[1, 3:] = False
    columns = {
        "action": torch.randint(0, 2, (2, 5)),
        "log_prob": -torch.rand(2, 5),
        "advantage": torch.randn(2, 5),
        "value": torch.randn(2, 5),
        "value_target": torch.randn(2, 5),
    }
    padded = TensorDict(
        {
            "observation": obs,
            "recurrent_state": state,
            "reset": reset,
            "valid": valid,
            **columns,
        },
        batch_size=[2],
    )

    def joined(x):
        return torch.cat([x[0], x[1, :3]])[None]

    flat = TensorDict(
        {
            "observation": joined(obs),
            "recurrent_state": state[:1],
            "reset": joined(reset),
            "valid": torch.ones(1, 8, dtype=torch.bool),
            **{key: joined(value) for key, value in columns.items()},
        },
        batch_size=[1],
    )
    return network, padded, flat


@pytest.mark.parametrize("loss_class", [PPOLoss, A2CLoss, ReinforceLoss])
def test_a_padded_batch_gives_the_loss_and_gradients_of_its_sequences_unpadded(loss_class):
    network, padded, flat = padded_pair()
    results = []
    for batch in (padded, flat):
        network.zero_grad()
        losses = loss_class(network)(batch)
        total = sum(value for key, value in losses.items() if key.startswith("loss_"))
        total.backward()
        grads = [p.grad.clone() for p in network.parameters() if p.grad is not None]
        results.append((losses, grads))
    (padded_losses, padded_grads), (flat_losses, flat_grads) = results
    for key in padded_losses.keys():  # noqa: SIM118 (a TensorDict)
        torch.testing.assert_close(padded_losses[key], flat_losses[key], atol=1e-6, rtol=1e-5)
    assert len(padded_grads) == len(flat_grads) > 0
    for a, b in zip(padded_grads, flat_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert all(torch.isfinite(g).all() for g in padded_grads)


def test_to_sequences_pads_ragged_rows_and_drops_empty_sequences():
    valid = np.array([[1, 1], [1, 1], [1, 0], [0, 0], [0, 0]], bool)  # [T=5, n=2]
    reward = np.arange(10, dtype=np.float32).reshape(5, 2)
    states = np.arange(10, dtype=np.float32).reshape(5, 2, 1)[::2]  # before steps 0, 2, 4
    items = to_sequences({"reward": reward}, states, valid, length=2)
    # env 0: steps 0-1, 2-3 (3 padding), 4-5 dropped (all padding); env 1: steps 0-1 only
    assert items["valid"].tolist() == [[True, True], [True, False], [True, True]]
    assert items["reward"].tolist() == [[0.0, 2.0], [4.0, 6.0], [1.0, 3.0]]
    assert items["recurrent_state"][:, 0].tolist() == [0.0, 4.0, 1.0]


def test_a_truncation_bootstraps_from_the_final_observation_under_the_state_before_reset():
    worker, network, _ = make_worker(num_envs=1, max_episode_steps=4)
    items = worker.rollout(num_steps=6, explore={}, policy_version=0).transitions
    assert items["truncated"][0].tolist() == [False, False, False, True, False, False]
    assert items["reset"][0].tolist() == [True, False, False, False, True, False]
    env = gym.make(
        "relayrl/StatelessCartPole-v1", max_episode_steps=4
    )  # the same episode again, for its final state
    env.reset(seed=0)
    for action in items["action"][0, :4]:
        final, *_ = env.step(int(action))
    with torch.no_grad():
        obs = torch.as_tensor(items["observation"][:, :4])
        _, _, before_reset = network(obs, torch.as_tensor(items["recurrent_state"]))
    bootstrap = worker.policy.value(final[None].astype(np.float32), before_reset.numpy())
    expected = items["reward"][0, 3] + 0.99 * bootstrap[0] - items["value"][0, 3]
    assert items["advantage"][0, 3] == pytest.approx(expected, abs=1e-5)
    fresh = worker.policy.value(final[None].astype(np.float32), np.zeros_like(before_reset))
    assert abs(fresh[0] - bootstrap[0]) > 1e-4  # a zeroed state would bootstrap differently


@pytest.mark.parametrize(
    ("config_name", "kind"), [("cartpole_ppo.yaml", "lstm"), ("cartpole_a2c.yaml", "gru")]
)
def test_a_lockstep_registration_trains_on_the_sequences_its_collectors_store(config_name, kind):
    from learner.core import LearnerCore
    from services.config import load_config
    from services.config.recipes import algorithm_for
    from services.config.spec import model_spec_for
    from tests.conftest import ROOT

    config = load_config(
        ROOT / "deploy" / "configs" / config_name,
        [f"collector.env_id={ENV}", f"learner.recurrent={kind}", "metrics.enabled=false"],
    )
    spec = model_spec_for(config)
    transform = algorithm_for(config).collector_transform(config)
    steps = config.collector.rollout_frames // config.collector.envs_per_collector
    assert transform.sequence_length == steps  # bptt_length 0: each env's whole rollout
    envs = make_vector_env(ENV, config.collector.envs_per_collector, autoreset="same_step")
    torch.manual_seed(0)
    core = LearnerCore(spec, config.learner)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    policy.view.network.load_state_dict(core.policy_network.state_dict())
    worker = OnPolicyWorker(envs, policy, list(range(envs.num_envs)), transform)
    items = worker.rollout(steps, {}, policy_version=0).transitions
    assert items["observation"].shape[:2] == (envs.num_envs, steps)
    before = [p.detach().clone() for p in core.policy_network.parameters()]
    metrics = core.train([core.to_batch(items)])
    assert all(np.isfinite(float(v)) for v in metrics.values())
    if "approx_kl" in metrics:  # the first step's policy is the one that acted
        assert abs(float(metrics["approx_kl"])) < 1e-6
    changed = [
        not torch.equal(a, b) for a, b in zip(before, core.policy_network.parameters(), strict=True)
    ]
    assert all(changed)  # the core and every gate of the recurrent layer learned


@pytest.mark.parametrize("config_name", ["cartpole_impala.yaml", "cartpole_appo.yaml"])
def test_chunks_of_a_recurrent_policy_replay_from_their_stored_state(config_name):
    from collector.chunks import ChunkWorker
    from learner.core import LearnerCore
    from learner.losses.chunks import evaluate_chunks
    from services.config import load_config
    from services.config.spec import model_spec_for
    from tests.conftest import ROOT

    config = load_config(
        ROOT / "deploy" / "configs" / config_name,
        [f"collector.env_id={ENV}", "learner.recurrent=lstm", "metrics.enabled=false"],
    )
    spec = model_spec_for(config)
    torch.manual_seed(0)
    core = LearnerCore(spec, config.learner)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    policy.view.network.load_state_dict(core.policy_network.state_dict())
    worker = ChunkWorker(make_vector_env(ENV, 4), policy, [0, 1, 2, 3])
    for _ in range(3):  # episodes end inside chunks, states carry over from rollout to rollout
        chunks = worker.rollout(num_steps=20, explore={}, policy_version=0).transitions
        assert chunks["reset"].shape == (4, 21) and chunks["recurrent_state"].shape[0] == 4
        # x_{t+1} starts an episode exactly when step t was an auto-reset step (valid False)
        np.testing.assert_array_equal(chunks["reset"][:, 1:], ~chunks["valid"])
        batch = core.to_batch(chunks)
        with torch.no_grad():
            log_prob, *_ = evaluate_chunks(core.policy_network, batch)
        torch.testing.assert_close(log_prob, batch["log_prob"], atol=1e-5, rtol=0)
    assert chunks["reset"][:, 1:].any() and (chunks["recurrent_state"] != 0).any()
    metrics = core.train([batch])
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_reinforce_stores_each_episode_as_padded_sequences_and_trains_on_them():
    from learner.core import LearnerCore
    from services.config import load_config
    from services.config.recipes import algorithm_for
    from services.config.spec import model_spec_for
    from tests.conftest import ROOT

    config = load_config(
        ROOT / "deploy" / "configs" / "cartpole_reinforce.yaml",
        [
            f"collector.env_id={ENV}",
            "learner.recurrent=gru",
            "learner.onpolicy.bptt_length=8",
            "metrics.enabled=false",
        ],
    )
    spec = model_spec_for(config)
    transform = algorithm_for(config).collector_transform(config)
    assert (transform.kind, transform.sequence_length) == ("episodes", 8)
    torch.manual_seed(0)
    core = LearnerCore(spec, config.learner)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    policy.view.network.load_state_dict(core.policy_network.state_dict())
    worker = OnPolicyWorker(
        make_vector_env(ENV, 4, autoreset="same_step"), policy, [0] * 4, transform
    )
    batch = worker.rollout(0, {}, policy_version=0, seeds=[1, 2, 3, 4])
    items = batch.transitions
    lengths = np.asarray(batch.episode_lengths)
    assert len(items["valid"]) == int(np.ceil(lengths / 8).sum())  # no all-padding sequence
    assert items["valid"].sum() == batch.frames == lengths.sum()
    assert items["reset"][:, 0].sum() == 4  # each episode's first sequence starts from zeros
    data = core.to_batch(items)
    with torch.no_grad():
        log_prob, _, _, steps = evaluate_steps(core.policy_network, data)
    torch.testing.assert_close(log_prob, steps["log_prob"], atol=1e-5, rtol=0)
    metrics = core.train([data])
    assert all(np.isfinite(float(v)) for v in metrics.values())


@pytest.mark.parametrize(
    ("config_name", "overrides", "field"),
    [
        ("cartpole_ppo.yaml", ["learner.onpolicy.bptt_length=5"], "learner.onpolicy.bptt_length"),
        ("cartpole_ppo.yaml", ["learner.onpolicy.num_minibatches=32"], "num_minibatches"),
        ("cartpole_ppo_torchrl.yaml", [], "learner.loss"),
    ],
)
def test_recurrent_configs_that_cannot_run_are_refused_naming_the_field(
    config_name, overrides, field
):
    from services.config import load_config
    from services.config.sections import ConfigError
    from tests.conftest import ROOT

    path = ROOT / "deploy" / "configs" / config_name
    with pytest.raises(ConfigError, match=field):  # 32 steps per env: 5 does not divide them
        load_config(path, ["learner.recurrent=lstm", *overrides])
    if "bptt_length" in field:  # without memory there is nothing to cut
        with pytest.raises(ConfigError, match="set learner.recurrent"):
            load_config(path, overrides)
    else:
        load_config(path, overrides)  # the same without memory is fine
