import subprocess
import sys
from pathlib import Path

import pytest

from services.config import ConfigError, RunConfig, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_validate_and_digest_is_stable():
    config = load_config()
    assert config == RunConfig()
    assert config.digest() == load_config().digest()
    assert config.learner.per_rank_batch_size == config.learner.global_batch_size


def test_overrides_are_typed():
    config = load_config(
        overrides=[
            "seed=7",
            "controller.total_frames=3e4",
            "learner.world_size=2",
            "learner.hidden_sizes=[32, 16]",
            "collector.num_collectors=2",
            "replay.num_shards=2",
            "metrics.enabled=false",
        ]
    )
    assert config.seed == 7
    assert config.controller.total_frames == 30_000
    assert config.learner.hidden_sizes == (32, 16)
    assert config.learner.per_rank_batch_size == 32
    assert config.metrics.enabled is False


def test_yaml_file_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("learner:\n  world_size: 2\ncontroller:\n  total_frames: 1000\n")
    config = load_config(path, ["controller.total_frames=2000"])
    assert config.learner.world_size == 2
    assert config.controller.total_frames == 2000


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["learner.world_size=0"], "learner.world_size: must be an integer >= 1"),
        (["learner.wrold_size=2"], "learner.wrold_size: unknown key; accepted:"),
        (["nonsense=1"], "nonsense: unknown key"),
        (
            ["learner.world_size=2", "learner.global_batch_size=63"],
            "learner.global_batch_size: must be divisible by world_size=2",
        ),
        (["collector.rollout_frames=100"], "collector.rollout_frames: must be a positive multiple"),
        (["learner.backend=mpi"], "learner.backend: must be one of"),
        (["learner.lr=fast"], "learner.lr: must be a number"),
        (["controller.total_frames=1.5"], "controller.total_frames: must be an integer"),
        (
            ["learner.resources_per_rank={CPU: 1, GPU: 0.5}", "learner.backend=nccl"],
            "learner.resources_per_rank: GPU must be a whole number",
        ),
        (["learner=3"], "learner: must be a mapping"),
        (["oops"], "expected KEY=VALUE"),
    ],
)
def test_invalid_config_names_the_field(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_epsilon_schedule():
    collector = load_config(
        overrides=[
            "collector.epsilon_start=1.0",
            "collector.epsilon_end=0.1",
            "collector.epsilon_anneal_frames=1000",
        ]
    ).collector
    assert collector.epsilon(0) == 1.0
    assert collector.epsilon(500) == pytest.approx(0.55)
    assert collector.epsilon(1000) == pytest.approx(0.1)
    assert collector.epsilon(10**9) == pytest.approx(0.1)


def test_validating_a_config_imports_no_torch():
    # A fresh interpreter: this one has imported torch for other tests.
    code = (
        "import sys\n"
        "from services.config import load_config\n"
        "for name in ('dqn', 'ppo', 'a2c', 'reinforce', 'sac'):\n"
        "    load_config(overrides=[f'algorithm={name}'])\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "False", result.stderr
