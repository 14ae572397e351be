"""Structured observations without Ray: layouts, refusals, encoder, per-key columns, learners."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

from collector.chunks import ChunkWorker
from collector.config import OnPolicyTransform
from collector.envs.spaces import describe, observation_space, regroup
from collector.envs.testing import AllSpacesEnv, CameraEnv
from collector.envs.vector import make_vector_env
from collector.networks.builders import NETWORKS, NetworkOptions, network_for_space
from collector.networks.encoders import MultiInputEncoder
from collector.onpolicy import OnPolicyWorker
from collector.rollout import RolloutWorker
from learner.config import LearnerConfig
from learner.core import LearnerCore
from replay.persist.checkpoint import dump_table, load_table
from replay.persist.items import take_items
from replay.persist.reshard import reshard_checkpoint
from replay.table import ReplayTable
from replay.wire.batches import BatchError, decode_batch, transition_spec
from services.config import load_config
from services.config.sections import ConfigError
from services.config.spec import env_spaces, model_spec_for
from tests.conftest import ROOT

ALL = "collector.envs.testing:all_spaces"
# Each leaf of AllSpacesEnv as collectors store it: (kind, per-item shape, dtype).
LEAVES = {
    "camera": ("image", (3, 36, 36), np.uint8),
    "flags": ("binary", (5,), np.int8),
    "grid": ("vector", (5, 5, 3), np.uint8),
    "matrix": ("vector", (2, 3), np.float32),
    "pose.0": ("discrete", (), np.int64),
    "pose.1": ("multi_discrete", (2,), np.int64),
    "scalar": ("vector", (), np.float32),
}


def options(**kwargs):
    return NetworkOptions(env_id=ALL, hidden_sizes=(16,), **kwargs)


def flat_all():
    return observation_space(AllSpacesEnv().observation_space)


def test_every_space_is_described_by_key_path_with_its_kind_shape_and_dtype():
    layout = describe(AllSpacesEnv().observation_space)
    got = {leaf.key: (leaf.kind, leaf.shape, np.dtype(leaf.dtype)) for leaf in layout.leaves}
    assert got == {k: (kind, shape, np.dtype(dtype)) for k, (kind, shape, dtype) in LEAVES.items()}
    assert describe(flat_all()) == layout  # the flattened space describes the same
    kept = describe(AllSpacesEnv().observation_space, keys=("pose", "flags"))
    assert kept.keys == ("flags", "pose.0", "pose.1")


def test_a_space_no_encoder_takes_is_refused_naming_itself_and_its_key_path():
    space = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8), "mission": gym.spaces.Text(8)}
    )
    with pytest.raises(ValueError, match=r"'mission' is a Text.*collector\.observation_keys"):
        describe(space, env_id="MiniGrid")
    assert describe(space, keys=("image",)).keys == ("image",)
    nested = gym.spaces.Dict(
        {
            "a": gym.spaces.Tuple(
                (gym.spaces.Discrete(2), gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None))
            )
        }
    )
    with pytest.raises(ValueError, match=r"key 'a\.1' is a Graph"):
        describe(nested)
    with pytest.raises(ValueError, match=r"collector\.observation_keys: 'nope' is not"):
        describe(space, keys=("nope",))


def test_a_config_with_a_space_the_algorithm_cannot_take_is_refused_before_any_actor():
    config = load_config(ROOT / "deploy/configs/cartpole_ppo.yaml", [f"collector.env_id={ALL}"])
    assert env_spaces(config)[0] == flat_all()  # PPO takes every leaf
    sac = load_config(ROOT / "deploy/configs/pendulum_sac.yaml", ["collector.env_id=" + ALL])
    with pytest.raises(ConfigError, match=r"collector\.env_id.*(flat Box|Discrete)"):
        model_spec_for(sac)
    keyed = dataclasses.replace(
        config, collector=dataclasses.replace(config.collector, observation_keys=("nope",))
    )
    with pytest.raises(ConfigError, match=r"collector\.observation_keys: 'nope'"):
        env_spaces(keyed)


@pytest.mark.parametrize("discrete", ["one_hot", "embedding"])
def test_the_encoder_takes_each_key_by_its_kind(discrete):
    layout = describe(flat_all())
    encoder = MultiInputEncoder(layout, discrete=discrete)
    batch = {
        k: torch.as_tensor(np.stack([flat_all()[k].sample() for _ in range(3)]))
        for k in layout.keys
    }
    features = encoder(batch)
    one_hots = 4 + 2 + 3 if discrete == "one_hot" else 8 * 3
    flat = 5 + 75 + 6 + 1
    cnn = encoder.modules_by_key["key0"].width  # the camera: the Nature CNN's features
    assert features.shape == (3, cnn + one_hots + flat)
    assert features.dtype == torch.float32
    onehot = describe(gym.spaces.Discrete(4, start=1))
    assert MultiInputEncoder(onehot)(torch.tensor([1, 4])).tolist() == [
        [1, 0, 0, 0],
        [0, 0, 0, 1],
    ]


def test_networks_are_chosen_per_space():
    box = gym.spaces.Box(-1, 1, (4,))
    assert network_for_space("q_mlp", box) == "q_mlp"
    assert network_for_space("q_mlp", flat_all()) == "multi_input_q"
    assert network_for_space("actor_critic", gym.spaces.MultiBinary(3)) == (
        "multi_input_actor_critic"
    )
    assert network_for_space("squashed", flat_all()) == "squashed"


@pytest.fixture(scope="module")
def columns():
    """One short rollout of each collector worker on AllSpacesEnv (off-policy, GAE, chunks)."""
    space, two = flat_all(), gym.spaces.Discrete(2)
    q_spec = NETWORKS["multi_input_q"](options(), space, two)
    ac_spec = NETWORKS["multi_input_actor_critic"](options(), space, two)
    seeds = [1, 2]
    rollout = RolloutWorker(
        make_vector_env(ALL, 2),
        q_spec.make_policy(q_spec.build(), np.random.SeedSequence(0)),
        seeds,
        n_step=2,
    ).rollout(10, {"epsilon": 0.5}, policy_version=1)
    gae = OnPolicyWorker(
        make_vector_env(ALL, 2, autoreset="same_step"),
        ac_spec.make_policy(ac_spec.build(), np.random.SeedSequence(0)),
        seeds,
        OnPolicyTransform(kind="gae", gamma=0.9, gae_lambda=0.9),
    ).rollout(12, {}, policy_version=1)
    episodes = OnPolicyWorker(
        make_vector_env(ALL, 2, autoreset="same_step"),
        ac_spec.make_policy(ac_spec.build(), np.random.SeedSequence(0)),
        seeds,
        OnPolicyTransform(kind="episodes", gamma=0.9, gae_lambda=0.9, baseline=True),
    ).rollout(0, {}, policy_version=1, seeds=seeds)
    chunks = ChunkWorker(
        make_vector_env(ALL, 2),
        ac_spec.make_policy(ac_spec.build(), np.random.SeedSequence(0)),
        seeds,
    ).rollout(5, {}, policy_version=1)
    return {
        "q": (q_spec, rollout),
        "gae": (ac_spec, gae),
        "episodes": (ac_spec, episodes),
        "chunks": (ac_spec, chunks),
    }


def test_each_key_is_its_own_column_with_its_dtype_from_every_collector(columns):
    for kind, (_, batch) in columns.items():
        arrays = batch.transitions
        assert "observation" not in arrays
        prefixes = ("observation.", "next_observation.") if kind == "q" else ("observation.",)
        for key, (_, shape, dtype) in LEAVES.items():
            for prefix in prefixes:
                column = arrays[prefix + key]
                lead = 2 if kind == "chunks" else 1
                assert column.dtype == dtype, (kind, prefix + key)
                assert column.shape[lead:] == shape, (kind, prefix + key)
                if kind == "chunks":
                    assert column.shape[1] == 6  # T + 1 states per chunk


def test_the_gae_bootstrap_reads_a_truncated_dict_observation(columns):
    _, batch = columns["gae"]  # 8-step episodes in 12 steps: truncations mid-rollout
    assert batch.transitions["truncated"].any()
    assert np.isfinite(batch.transitions["value_target"]).all()


@pytest.mark.parametrize(
    ("kind", "loss"),
    [
        ("q", "dqn"),
        ("gae", "ppo"),
        ("gae", "a2c"),
        ("episodes", "reinforce"),
        ("chunks", "impala"),
        ("chunks", "appo"),
    ],
)
def test_learners_train_on_the_columns_nested_as_a_mapping(columns, kind, loss):
    spec, batch = columns[kind]
    config = LearnerConfig(loss=loss, global_batch_size=4)
    core = LearnerCore(spec, config)
    tensors = core.to_batch(batch.transitions)
    observation = tensors["observation"]
    assert sorted(observation.keys()) == sorted(LEAVES)
    assert observation["camera"].dtype == torch.uint8  # scaled by the network, on its device
    assert observation["pose.0"].dtype == torch.int64
    before = [p.detach().clone() for p in core.policy_network.parameters()]
    metrics = core.train([tensors])
    assert all(torch.isfinite(v) for v in metrics.values())
    after = list(core.policy_network.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_regroup_nests_only_observation_columns():
    assert regroup({"observation": 1, "next_observation": 2}) == {
        "observation": 1,
        "next_observation": 2,
    }


def test_the_wire_carries_named_fields_and_old_box_clients_keep_their_spec():
    box = transition_spec(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    assert list(box.tensors) == [
        "observation",
        "action",
        "reward",
        "next_observation",
        "terminated",
        "truncated",
        "n_step_discount",
        "policy_version",
    ]
    spec = transition_spec(flat_all(), gym.spaces.Discrete(2))
    assert spec.tensors["observation.camera"].shape == (3, 36, 36)
    assert spec.tensors["next_observation.pose.1"].dtype == "int64"

    @dataclasses.dataclass
    class Tensor:  # what the generated protobuf Tensor carries
        key: str
        dtype: str
        shape: tuple
        data: bytes

    def tensors(skip=""):
        for key, tensor in spec.tensors.items():
            if key != skip:
                array = np.zeros((3, *tensor.shape), tensor.dtype)
                yield Tensor(key, tensor.dtype, array.shape, array.tobytes())

    arrays = decode_batch(list(tensors()), spec, max_bytes=1 << 20)
    assert arrays["observation.flags"].shape == (3, 5)
    with pytest.raises(BatchError, match="observation.grid"):
        decode_batch(list(tensors(skip="observation.grid")), spec, max_bytes=1 << 20)


def test_the_camera_env_flattened_is_the_same_env_as_one_box():
    box, keyed = CameraEnv(size=36, flat=True), CameraEnv(size=36)
    (flat, _), (obs, _) = box.reset(seed=3), keyed.reset(seed=3)
    assert flat.shape == (36 * 36 * 3 + 4,)
    assert np.array_equal(flat, gym.spaces.flatten(keyed.structured, obs))


def test_replay_checkpoints_and_resharding_carry_every_key_column(columns, tmp_path):
    arrays = columns["q"][1].transitions
    old = ReplayTable(64, shard_id=0, seed=0)
    old.write(arrays, "collector-0", 0)
    dump_table(old, tmp_path / "ckpt" / "replay-0")
    counts = reshard_checkpoint(
        tmp_path / "ckpt", 1, 2, tmp_path / "new", capacity_per_shard=64, seeds=[1, 2]
    )
    assert counts["items_after"] == len(arrays["reward"])
    new = [load_table(tmp_path / "new" / f"replay-{j}") for j in range(2)]
    rows = [take_items(table).columns for table in new]
    for key, (_, shape, dtype) in LEAVES.items():
        for prefix in ("observation.", "next_observation."):
            restored = np.concatenate([r[prefix + key] for r in rows])
            assert restored.dtype == dtype and restored.shape[1:] == shape
            assert sorted(map(bytes, restored)) == sorted(map(bytes, arrays[prefix + key]))


def test_a_users_network_receives_the_dict_and_trains(tmp_path):
    config = load_config(
        ROOT / "deploy/configs/cartpole_ppo.yaml",
        [
            "collector.env_id=collector.envs.testing:corridor",
            "learner.network=tests.network_examples:corridor_actor_critic",
        ],
    )
    spec = model_spec_for(config)  # built once and probed on a dummy dict batch
    assert spec.family == "actor_critic"
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    envs = make_vector_env(config.collector.env_id, 2, autoreset="same_step")
    transform = OnPolicyTransform(kind="gae", gamma=0.9, gae_lambda=0.9)
    batch = OnPolicyWorker(envs, policy, [1, 2], transform).rollout(25, {}, policy_version=0)
    assert batch.transitions["observation.agent"].dtype == np.int64
    core = LearnerCore(spec, LearnerConfig(loss="ppo", global_batch_size=8))
    metrics = core.train([core.to_batch(batch.transitions)])
    assert metrics and all(torch.isfinite(v) for v in metrics.values())
    broken = load_config(
        ROOT / "deploy/configs/cartpole_ppo.yaml",
        [f"collector.env_id={ALL}", "learner.network=tests.network_examples:corridor_actor_critic"],
    )
    with pytest.raises(ConfigError, match=r"learner\.network: .*corridor_actor_critic"):
        model_spec_for(broken)  # AllSpacesEnv has no 'agent' key


def test_an_env_whose_package_is_missing_is_refused_naming_the_extra():
    from collector.envs.vector import register_env_package

    register_env_package("MiniGrid-DoorKey-5x5-v0")  # the minigrid extra (CI installs it)
    fake = {"Fake-": ("relayrl_no_such_package", "fake")}
    with pytest.raises(ImportError, match=r"the fake extra is not installed: .*relayrl\[fake\]"):
        register_env_package("Fake-Grid-v0", fake)
    register_env_package("CartPole-v1", fake)  # other ids import nothing
    config = load_config(ROOT / "deploy/configs/minigrid_doorkey_ppo.yaml")
    spaces = env_spaces(config)
    assert sorted(spaces[0].spaces) == ["direction", "image"]  # mission dropped
    dropped = load_config(
        ROOT / "deploy/configs/minigrid_doorkey_ppo.yaml", ["collector.observation_keys=[]"]
    )
    with pytest.raises(ConfigError, match=r"'mission' is a MissionSpace.*observation_keys"):
        env_spaces(dropped)


def test_a_bare_discrete_observation_is_one_hot_encoded_end_to_end():
    config = load_config(
        ROOT / "deploy/configs/cartpole_dqn.yaml", ["collector.env_id=FrozenLake-v1"]
    )
    spec = model_spec_for(config)  # Discrete(16) observations: the multi-input Q-network
    assert type(spec).__name__ == "MultiInputQSpec" and not spec.layout.keyed
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    worker = RolloutWorker(make_vector_env("FrozenLake-v1", 2), policy, [1, 2])
    arrays = worker.rollout(20, {"epsilon": 0.5}, policy_version=0).transitions
    assert arrays["observation"].dtype == np.int64 and arrays["observation"].ndim == 1
    core = LearnerCore(spec, LearnerConfig(loss="dqn", global_batch_size=8))
    metrics = core.train([core.to_batch(arrays)])
    assert metrics and all(torch.isfinite(v) for v in metrics.values())


def test_an_external_actor_on_a_dict_env_sends_the_runs_named_fields_and_loads_its_weights():
    from replay.wire.codecs import encode_arrays
    from services.external_actor import actor_spec, served_observation_keys
    from services.grpc.transitions import env_transition_spec

    config = load_config(
        ROOT / "deploy/configs/cartpole_dqn.yaml",
        [f"collector.env_id={ALL}", "collector.observation_keys=[camera, pose, flags]"],
    )
    served = config.to_dict()  # what GetStatus's config_json carries
    keys = served_observation_keys(served)
    envs = make_vector_env(ALL, 2, observation_keys=keys)
    hidden = tuple(config.learner.hidden_sizes)
    spec = actor_spec(ALL, envs, hidden, served)
    run_network = model_spec_for(config).build()
    network = spec.build()
    network.load_state_dict(run_network.state_dict())  # the served weights load as they are
    policy = spec.make_policy(network, np.random.SeedSequence(0))
    arrays = RolloutWorker(envs, policy, [1, 2], n_step=3).rollout(8, 0.5, 0).transitions
    wire = env_transition_spec(ALL, {}, config.collector.observation_keys)
    assert sorted(k for k in wire.tensors if k.startswith("observation.")) == [
        "observation.camera", "observation.flags", "observation.pose.0", "observation.pose.1",
    ]  # fmt: skip

    @dataclasses.dataclass
    class Tensor:
        key: str
        dtype: str
        shape: list
        data: bytes

    tensors = [Tensor(*fields) for fields in encode_arrays(arrays)]
    decoded = decode_batch(tensors, wire, max_bytes=1 << 24)
    assert decoded["next_observation.camera"].shape[1:] == (3, 36, 36)
    box = actor_spec("CartPole-v1", make_vector_env("CartPole-v1", 1), (8,), {})
    assert type(box).__name__ == "ModelSpec" and box.obs_dim == 4  # the Box path as ever


def test_the_spaces_bench_alternates_both_paths_and_reports_the_ratio():
    from services.bench.runtime.spaces import measure

    result = measure(rounds=2, seconds=0.2, num_envs=2, size=36, steps=8, act=False, seed=0)
    assert result["networks"] == {"dict": "multi_input_q", "box": "q_mlp"}
    assert len(result["ratios"]) == 2 and result["dict_over_box_frame_cost"] > 0
    assert result["dict_frames_per_s"] > 0 and result["box_frames_per_s"] > 0


def test_frame_deduplication_with_a_dict_observation_is_refused_naming_the_field():
    config = load_config(
        ROOT / "deploy/configs/cartpole_dqn.yaml",
        [f"collector.env_id={ALL}", "replay.frame_stack=4"],
    )
    with pytest.raises(ConfigError, match=r"^replay\.frame_stack: with a Dict observation"):
        env_spaces(config)
