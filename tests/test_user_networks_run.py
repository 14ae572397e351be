"""Your own network end to end (docs/networks.md's examples) on the shared local Ray.

For DQN (a residual MLP), PPO (a shared-torso actor-critic) and SAC (an actor with its own
critic): half the budget, a checkpoint, a resume for the other half (a new learner
generation), a greedy evaluation above random play; then ``load_policy`` replays that
evaluation exactly, and the policy's pt2 and ONNX files run without relayrl and match ``act``.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from services.config import load_config
from services.driver.controller import Controller
from services.evaluation.evaluator import EvaluationRunner
from services.evaluation.playback import evaluate_policy
from services.policy import load_policy
from tests.conftest import PYTHON, ROOT, cli_env
from tests.test_policy import export_case, run_isolated

CONFIGS = ROOT / "deploy" / "configs"
EXAMPLES = "tests.network_examples"

# (config, factory, frames, greedy return above random play, overrides)
CASES = {
    "dqn": (
        CONFIGS / "cartpole_dqn.yaml",
        "residual_q_network",
        8_000,
        60.0,  # random play: about 22
        ["collector.epsilon_anneal_frames=4000", "learner.hidden_sizes=[64]"],
    ),
    "ppo": (
        CONFIGS / "cartpole_ppo.yaml",
        "shared_torso_actor_critic",
        8_192,
        50.0,  # random play: about 22
        ["controller.stop_return=null"],
    ),
    "sac": (
        CONFIGS / "pendulum_sac.yaml",
        "sac_actor",
        4_000,
        -1000.0,  # random play: about -1200 to -1300
        ["learner.hidden_sizes=[64]", "controller.init_random_frames=1000"],
    ),
}


def run(config, **kwargs) -> tuple[dict, dict]:
    """Runs a controller to its end; returns its summary and its final evaluation's record."""
    controller = Controller(config, **kwargs)
    EvaluationRunner(config, controller).attach()  # as services.run.launch does
    try:
        summary = controller.run()
    finally:
        controller.shutdown()
    return summary, controller.evaluation.schedule.last


@pytest.mark.parametrize("name", list(CASES))
def test_a_user_network_trains_resumes_loads_and_exports(ray_cluster, tmp_path, name):
    config_file, factory, frames, above_random, overrides = CASES[name]
    common = [
        f"learner.network={EXAMPLES}:{factory}",
        "metrics.enabled=false",
        "controller.log_interval_s=1",
        "evaluation.interval_frames=1000000000",  # only the end-of-run evaluation
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
        [*common, f"controller.total_frames={frames}", f"checkpoint.dir={tmp_path / 'b'}"],
    )
    summary, evaluation = run(rest, resume_from=tmp_path / "a")
    assert summary["generation"] == first["generation"] + 1  # resumed: a new learner generation
    assert summary["model_version"] > first["model_version"] and summary["frames"] >= frames
    assert evaluation["version"] == summary["published_version"]
    assert evaluation["episode_return_mean"] > above_random, (evaluation, summary)

    policy = load_policy(tmp_path / "b")  # its final checkpoint, without Ray
    assert policy.version == evaluation["version"]
    replay = evaluate_policy(policy)  # the run's seed, episodes and envs
    assert replay["episodes"] == evaluation["episodes"] == 4
    assert replay["return_mean"] == evaluation["episode_return_mean"]  # the same episodes
    assert min(replay["returns"]) == evaluation["episode_return_min"]

    cases = [export_case(policy, "pt2", tmp_path, name)]
    if name == "dqn":  # the command, once: it writes, loads back and checks the file
        out = tmp_path / "dqn.onnx"
        command = [PYTHON, "-m", "services.export", str(tmp_path / "b"), "--format", "onnx"]
        result = subprocess.run(
            [*command, "--out", str(out)],
            cwd=ROOT,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        written = json.loads(result.stdout.strip().splitlines()[-1])
        assert written["output"]["name"] == "q_values" and written["discrete"]
    else:
        cases.append(export_case(policy, "onnx", tmp_path, name))
    assert run_isolated(cases, tmp_path)["checked"] == len(cases)
