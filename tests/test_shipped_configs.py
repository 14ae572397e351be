"""Every file in deploy/configs/ parses, validates, builds its env and network, and starts.

One mechanism for all: :func:`built` loads a config as shipped and builds its env's spaces, its
network spec and the network (in process, no Ray). A config asking for a GPU is refused on a
host without CUDA naming ``learner.resources_per_rank`` (as ``services.train`` does) and is then
checked with the GPU part swapped for one CPU (``GPU_SWAP``). :func:`start_briefly` runs a
config on the shared Ray cut to one collector and one shard for one rollout; the configs that
other tests already run end to end are listed in ``STARTED_ELSEWHERE`` with the test file (each
test file is checked to name its config), and ``BUILT_ONLY`` says why the rest only build.
"""

from __future__ import annotations

import pytest
import torch

from learner.algorithms import ALGORITHMS
from services.config import ConfigError, load_config
from services.config.spec import check_local_gpus, env_spaces, model_spec_for
from services.driver.controller import Controller
from services.driver.loops.asynchronous import full_queue_lag
from tests.conftest import ROOT

CONFIGS = ROOT / "deploy" / "configs"
SHIPPED = sorted(path.name for path in CONFIGS.glob("*.yaml"))
GPU_SWAP = ("learner.resources_per_rank={CPU: 1}", "learner.backend=auto", "learner.compile='off'")

# Run end to end by these test files (each names the config); the rest start here.
STARTED_ELSEWHERE = {
    "cartpole_a2c.yaml": "test_algorithms_run.py",
    "cartpole_appo.yaml": "test_async_run.py",
    "cartpole_impala.yaml": "test_async_run.py",
    "cartpole_dqn.yaml": "test_cli.py",
    "cartpole_dqn_torchrl.yaml": "test_torchrl_loss.py",
    "cartpole_ppo.yaml": "test_algorithms_run.py",
    "cartpole_ppo_torchrl.yaml": "test_torchrl_ppo.py",
    "cartpole_reinforce.yaml": "test_algorithms_run.py",
    "connect4_dqn_masked.yaml": "test_masked_run.py",
    "connect4_ppo_masked.yaml": "test_masked_run.py",
    "pendulum_sac.yaml": "test_algorithms_run.py",
    "pong_dqn.yaml": "test_atari_run.py",
    "spread_iql.yaml": "test_marl_run.py",
    "spread_qmix.yaml": "test_marl_run.py",
    "spread_vdn.yaml": "test_marl_run.py",
    "statelesscartpole_dqn_lstm.yaml": "test_dqn_recurrent.py",
    "statelesscartpole_r2d2.yaml": "test_r2d2_run.py",
    "statelesscartpole_r2d2_external.yaml": "test_grpc_sequences.py",
    "pendulum_sac_lstm.yaml": "test_sac_recurrent.py",
}
# Built in process only (a start adds nothing the others do not): the external-actor config
# (no collectors; the gRPC run tests drive one), the multi-node and GPU configs (16 collectors,
# GPUs; CartPole DQN and the Pong configs start), the small Pong DQN (pong_dqn.yaml's path
# starts in test_atari_run; the learn bench runs it), CartPole DQN with two ranks
# (test_learner_group runs two), and the pairings of an env and a loop that start elsewhere
# (LunarLander: DQN here, PPO by the learn bench; Hopper: SAC here, Gaussian PPO on MountainCar
# here; MiniGrid: PPO on a Dict observation starts in test_spaces_run, the learn bench runs it;
# POPGym: recurrent PPO starts on StatelessCartPole, the learn bench runs RepeatPrevious).
BUILT_ONLY = {
    "cartpole_dqn_external.yaml",
    "multinode_dqn.yaml",
    "pong_dqn_gpu.yaml",
    "pong_ppo_gpu.yaml",
    "pong_appo_gpu.yaml",
    "pong_r2d2_gpu.yaml",
    "pong_dqn_small.yaml",
    "cartpole_dqn_ws2.yaml",
    "lunarlander_ppo.yaml",
    "lunarlander_appo.yaml",
    "hopper_ppo.yaml",
    "minigrid_doorkey_ppo.yaml",
    "repeatprevious_ppo_gru.yaml",
}
START_HERE = [n for n in SHIPPED if n not in STARTED_ELSEWHERE and n not in BUILT_ONLY]


def built(name: str, *overrides: str):
    """The config as shipped (GPU swapped for a CPU), its spec and network; checks the refusal."""
    config = load_config(CONFIGS / name, overrides)
    if config.learner.uses_gpu:
        if not torch.cuda.is_available():
            with pytest.raises(ConfigError, match=r"^learner\.resources_per_rank: asks for a GPU"):
                check_local_gpus(config)
        config = load_config(CONFIGS / name, [*overrides, *GPU_SWAP])
    check_local_gpus(config)
    spec = model_spec_for(config, env_spaces(config))
    return config, spec, spec.build()


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_parses_validates_and_builds(name):
    config, spec, network = built(name)
    assert config.run.name and config.controller.total_frames > 0
    assert sum(p.numel() for p in network.parameters()) > 0
    assert type(spec).__name__ in repr(spec)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_asynchronous_configs_keep_a_full_queue_within_the_lag_limit(name):
    config = load_config(CONFIGS / name)
    if ALGORITHMS[config.algorithm].loop != "async":
        return
    # A full queue must not make the shipped config drop chunks (services.bench async).
    assert config.learner.max_policy_lag >= full_queue_lag(config), name


def test_every_shipped_config_is_started_by_a_test():
    assert set(STARTED_ELSEWHERE) | BUILT_ONLY | set(START_HERE) == set(SHIPPED)
    assert not BUILT_ONLY & set(STARTED_ELSEWHERE)
    for name, test_file in STARTED_ELSEWHERE.items():
        assert name in (ROOT / "tests" / test_file).read_text(), (name, test_file)


def start_briefly(name: str, storage) -> dict:
    """One rollout of one collector into one shard, as the config otherwise ships."""
    config, _, _ = built(name)
    rollout = config.collector.rollout_frames
    overrides = [
        "collector.num_collectors=1",
        "replay.num_shards=1",
        f"replay.capacity={max(rollout, 1024)}",
        "replay.storage=memory",
        "replay.frame_stack=0",
        f"controller.total_frames={rollout * config.collector.frame_skip}",
        "controller.init_random_frames=0",
        "metrics.enabled=false",
        "checkpoint.at_end=false",
        "checkpoint.interval_frames=0",
        f"run.storage={storage}",
    ]
    controller = Controller(load_config(CONFIGS / name, overrides))
    try:
        return controller.run()
    finally:
        controller.shutdown()


@pytest.mark.parametrize("name", START_HERE)
def test_shipped_config_starts(ray_cluster, tmp_path, name):
    summary = start_briefly(name, tmp_path)
    config = load_config(CONFIGS / name)
    assert summary["frames"] >= config.collector.rollout_frames * config.collector.frame_skip
    assert summary["transitions"] > 0
