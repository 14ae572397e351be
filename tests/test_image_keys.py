"""Per-key image preprocessing (``collector.image_keys``) and frame-deduplicated Dict replay."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collector.config import OnPolicyTransform
from collector.envs.images import ImageObservation, frame_key_of, images_of
from collector.envs.spaces import FlatObservation
from collector.envs.testing import CameraEnv
from collector.envs.vector import make_vector_env
from collector.networks.encoders import MultiInputEncoder
from collector.onpolicy import OnPolicyWorker
from collector.rollout import RolloutWorker
from learner.config import LearnerConfig
from learner.core import LearnerCore
from replay.persist.checkpoint import dump_table, load_table
from replay.table import ReplayTable
from services.config import load_config
from services.config.sections import ConfigError
from services.config.spec import env_spaces, model_spec_for
from services.evaluation.envs import make_evaluation_envs
from services.policy.policy import Policy
from tests.conftest import ROOT

CAMERA = "collector.envs.testing:camera"
KWARGS = "collector.env_kwargs={size: 48, episode_steps: 7}"
IMAGES = "collector.image_keys={image: {grayscale: true, resize: [36, 40], frame_stack: 3}}"
SHAPE = (3, 36, 40)  # [frame_stack * 1 gray channel, height, width]


def dqn(*extra):
    return load_config(
        ROOT / "deploy/configs/cartpole_dqn.yaml",
        [f"collector.env_id={CAMERA}", KWARGS, IMAGES, "learner.hidden_sizes=[16]", *extra],
    )


@pytest.fixture(scope="module")
def spec():
    return model_spec_for(dqn("replay.frame_stack=3"))


def test_the_key_is_preprocessed_for_the_encoder_and_the_spec_carries_it(spec):
    space = env_spaces(dqn())[0]
    assert space["image"].shape == SHAPE and space["image"].dtype == np.uint8
    assert space["state"].shape == (4,)
    (image,) = images_of(spec)
    assert (image.key, image.raw_shape, image.shape) == ("image", (48, 48, 3), SHAPE)
    assert frame_key_of(spec, 3) == "image" and frame_key_of(spec, 4) == ""
    encoder = MultiInputEncoder(spec.layout)
    (cnn,) = encoder.modules_by_key.values()
    assert cnn.torso[0].in_channels == 3 and not cnn.last  # the Nature CNN, channels first


def test_the_workers_collect_the_preprocessed_key_and_stacks_slide(spec):
    images = images_of(spec)
    envs = make_vector_env(CAMERA, 2, env_kwargs={"size": 48, "episode_steps": 7}, images=images)
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    out = RolloutWorker(envs, policy, [1, 2], n_step=1).rollout(9, 0.5, 0).transitions
    obs, nxt = out["observation.image"], out["next_observation.image"]
    assert obs.shape[1:] == SHAPE and obs.dtype == np.uint8
    assert out["observation.state"].shape[1:] == (4,)
    assert out["observation.state"].dtype == np.float32
    inside = ~(out["terminated"] | out["truncated"])
    np.testing.assert_array_equal(obs[inside][:, 1:], nxt[inside][:, :-1])  # one frame newer
    ac = model_spec_for(
        load_config(
            ROOT / "deploy/configs/cartpole_ppo.yaml",
            [f"collector.env_id={CAMERA}", KWARGS, IMAGES, "learner.hidden_sizes=[16]"],
        )
    )
    envs = make_vector_env(
        CAMERA, 2, env_kwargs={"size": 48}, images=images_of(ac), autoreset="same_step"
    )
    transform = OnPolicyTransform(kind="gae", gamma=0.9, gae_lambda=0.9)
    policy = ac.make_policy(ac.build(), np.random.SeedSequence(0))
    batch = OnPolicyWorker(envs, policy, [1, 2], transform).rollout(6, {}, policy_version=0)
    assert batch.transitions["observation.image"].shape[1:] == SHAPE
    evaluation = make_evaluation_envs(spec, CAMERA, 2, {"size": 48})  # evaluation's envs too
    obs, _ = evaluation.reset(seed=[3, 4])
    assert obs["image"].shape == (2, *SHAPE) and obs["image"].dtype == np.uint8
    evaluation.close()


def test_a_policy_takes_the_raw_dict_observation_as_the_wrapped_env_sees_it(spec):
    config = dqn()
    raw_env = CameraEnv(size=48, episode_steps=7)
    flat = FlatObservation(CameraEnv(size=48, episode_steps=7))
    wrapped = ImageObservation(flat, spec.layout.images)
    space, actions = env_spaces(config)
    policy = Policy(spec.build(), spec, config, space, actions)
    (raw, _), (seen, _) = raw_env.reset(seed=5), wrapped.reset(seed=5)
    policy.reset()
    for step in range(10):
        expected = policy.head(policy.structured(seen)[0])  # the collectors' view
        got = policy.head(policy.structured(raw)[0])  # raw [48, 48, 3]: preprocessed, stacked
        np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
        assert policy.act(seen).shape == ()  # a preprocessed observation passes as it is
        action = step % 2
        raw, _, term, trunc, _ = raw_env.step(action)
        seen, *_ = wrapped.step(action)
        if term or trunc:
            (raw, _), (seen, _) = raw_env.reset(seed=step), wrapped.reset(seed=step)
            policy.reset()


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["collector.image_keys={nope: {}}"], r"collector\.image_keys: 'nope' is not an obs"),
        (["collector.image_keys={state: {}}"], r"collector\.image_keys: 'state' .* not an image"),
        (
            ["collector.image_keys={image: {resize: [8, 8]}}"],
            r"^collector\.image_keys: 'image': resize must be",
        ),
        (["collector.image_keys={image: {gray: true}}"], r"image_keys: 'image': unknown option"),
        (
            [
                "collector.env_id=CartPole-v1",
                "collector.env_kwargs={}",
                "collector.image_keys={image: {}}",
            ],
            r"collector\.image_keys: preprocesses keys of a Dict",
        ),
        (
            [IMAGES, "replay.frame_stack=4"],
            r"replay\.frame_stack: with a Dict observation.*frame_stack: 4.*stacked keys \[\]",
        ),
    ],
)
def test_refusals_name_the_field_and_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        config = load_config(
            ROOT / "deploy/configs/cartpole_dqn.yaml",
            [f"collector.env_id={CAMERA}", KWARGS, *overrides],
        )
        env_spaces(config)


def test_frame_dedup_stores_the_stacked_key_once_and_rebuilds_it_exactly(spec, tmp_path):
    images = images_of(spec)
    kwargs = {"size": 48, "episode_steps": 7}
    workers = [
        RolloutWorker(
            make_vector_env(CAMERA, 2, env_kwargs=kwargs, images=images),
            spec.make_policy(spec.build(), np.random.SeedSequence(0)),
            [1, 2],
            n_step=2,
            frame_stack=stack,
            frame_key=frame_key_of(spec, stack),
        )
        for stack in (0, 3)
    ]
    reference, streamed = ([], [])
    for _ in range(3):
        reference.append(workers[0].rollout(8, 1.0, 0).transitions)  # the same random actions
        streamed.append(workers[1].rollout(8, 1.0, 0).transitions)
    first = streamed[0]
    assert "observation.image" not in first and "observation.state" in first
    assert len(first["frames"]) < 3 * len(first["obs_frame.image"])  # not 2 * 3 per transition
    table = ReplayTable(1000, frame_stack=3, seed=0)
    for seq, write in enumerate(streamed):
        table.write(write, "collector-0", seq)
    ref = {k: np.concatenate([r[k] for r in reference]) for k in reference[0]}
    slots = np.arange(len(ref["reward"]))
    for stored in (table.storage.gather(slots), None):
        if stored is None:  # again from a checkpoint of the table
            dump_table(table, tmp_path / "replay-0")
            stored = load_table(tmp_path / "replay-0").storage.gather(slots)
        for key, value in ref.items():
            np.testing.assert_array_equal(stored[key], value, err_msg=key)
    core = LearnerCore(spec, LearnerConfig(loss="dqn", global_batch_size=8))
    metrics = core.train([core.to_batch(table.sample(8))])
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_a_served_run_keeps_the_dedup_refusal():
    config = dqn("replay.frame_stack=3")
    served = dataclasses.replace(config, grpc=dataclasses.replace(config.grpc, port=0))
    with pytest.raises(ConfigError, match=r"grpc\.port: external actors insert stacked"):
        env_spaces(served)
