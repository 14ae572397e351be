"""Your own network end to end (docs/networks.md's examples) on the shared local Ray.

For DQN (a residual MLP), PPO (a shared-torso actor-critic) and SAC (an actor with its own
critic): half the budget, a checkpoint, a resume for the other half (a new learner
generation; SAC's at other sizes, its restored state checked), a greedy evaluation above random
play; then ``load_policy`` replays that
evaluation exactly, and the policy's pt2 and ONNX files match ``act`` (tests/test_policy.py runs
such files in an interpreter without relayrl).
"""

from __future__ import annotations

import json

import pytest
import torch

from services import export as export_command
from services.checkpoints.store import latest_valid
from services.config import load_config
from services.driver.controller import Controller
from services.evaluation.evaluator import EvaluationRunner
from services.evaluation.playback import evaluate_policy
from services.policy import load_policy
from tests.conftest import ROOT
from tests.test_policy import check_files, export_case

CONFIGS = ROOT / "deploy" / "configs"
EXAMPLES = "tests.network_examples"

# Fewer actor processes: each one imports torch as it starts.
ONE_OF_EACH = ["collector.num_collectors=1", "replay.num_shards=1"]

# SAC's resume runs at other sizes (#28): more collectors and shards (ranks: test_elastic_resume).
RESIZED = ["collector.num_collectors=2", "replay.num_shards=2"]

# (config, factory, frames, greedy return above random play, overrides)
CASES = {
    "dqn": (
        CONFIGS / "cartpole_dqn.yaml",
        "residual_q_network",
        8_000,
        60.0,  # random play: about 22
        ["collector.epsilon_anneal_frames=4000", "learner.hidden_sizes=[64]", *ONE_OF_EACH],
    ),
    "ppo": (
        CONFIGS / "cartpole_ppo.yaml",
        "shared_torso_actor_critic",
        8_192,
        50.0,  # random play: about 22
        ["controller.stop_return=null", "collector.num_collectors=1"],
    ),
    "sac": (
        CONFIGS / "pendulum_sac.yaml",
        "sac_actor",
        4_000,
        -1000.0,  # random play: about -1200 to -1300
        ["learner.hidden_sizes=[64]", "controller.init_random_frames=1000"],
    ),
}


def run(config, on_setup=None, **kwargs) -> tuple[dict, dict]:
    """Runs a controller to its end; returns its summary and its final evaluation's record."""
    controller = Controller(config, **kwargs)
    if on_setup is not None:
        controller.register("setup", on_setup)
    if config.evaluation.enabled:
        EvaluationRunner(config, controller).attach()  # as services.run.launch does
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    evaluation = controller.evaluation
    return summary, evaluation.schedule.last if evaluation is not None else None


@pytest.mark.parametrize("name", list(CASES))
def test_a_user_network_trains_resumes_loads_and_exports(ray_cluster, tmp_path, capsys, name):
    config_file, factory, frames, above_random, overrides = CASES[name]
    common = [
        f"learner.network={EXAMPLES}:{factory}",
        "metrics.enabled=false",
        "controller.log_interval_s=1",
        "evaluation.episodes=4",
        *overrides,
    ]
    half = load_config(
        config_file,
        [*common, f"controller.total_frames={frames // 2}", f"checkpoint.dir={tmp_path / 'a'}"],
    )
    first, _ = run(half)
    assert list((tmp_path / "a").glob("ckpt-*"))  # the end-of-run checkpoint
    rest = load_config(
        config_file,
        [
            *common,
            f"controller.total_frames={frames}",
            f"checkpoint.dir={tmp_path / 'b'}",
            "evaluation.interval_frames=1000000000",  # only the end-of-run evaluation
            *(RESIZED if name == "sac" else []),
        ],
    )
    restored = []  # each rank's state right after the restore
    summary, evaluation = run(
        rest,
        resume_from=tmp_path / "a",
        on_setup=lambda c: restored.extend(c.learners.state_dicts()),
    )
    if name == "sac":  # resumed at other sizes: every network and the temperature restored
        saved = torch.load(latest_valid(tmp_path / "a")[0] / "learner-0.pt", weights_only=True)
        assert len(restored) == 1
        for state in restored:
            assert all(torch.equal(state["loss"][k], v) for k, v in saved["loss"].items())
    assert summary["generation"] == first["generation"] + 1  # resumed: a new learner generation
    assert summary["model_version"] > first["model_version"] and summary["frames"] >= frames
    assert evaluation["version"] == summary["published_version"]
    assert evaluation["episode_return_mean"] > above_random, (evaluation, summary)

    policy = load_policy(tmp_path / "b", allow_modules=["tests"])  # without Ray
    assert policy.version == evaluation["version"]
    replay = evaluate_policy(policy)  # the run's seed, episodes and envs
    assert replay["episodes"] == evaluation["episodes"] == 4
    assert replay["return_mean"] == evaluation["episode_return_mean"]  # the same episodes
    assert min(replay["returns"]) == evaluation["episode_return_min"]

    cases = [export_case(policy, fmt, tmp_path, name) for fmt in ("pt2", "onnx")]
    assert check_files(cases) == 2  # torch.export.load and onnxruntime read them as they are
    if name == "dqn":  # the command, once (tests/test_policy.py runs such files without relayrl)
        out = tmp_path / "command.onnx"
        args = [str(tmp_path / "b"), "--format", "onnx", "--out", str(out)]
        args += ["--allow-module", "tests"]  # the checkpoint names this test's network
        assert export_command.main(args, prog="relayrl export") == 0
        written = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert written["out"] == str(out) and written["output"]["name"] == "q_values"
