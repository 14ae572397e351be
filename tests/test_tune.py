"""``python -m services.tune`` on the session Ray: ASHA, PBT with an exploit, --resume, refusals."""

from __future__ import annotations

import csv
import json
import os
import signal
from pathlib import Path

import pytest
import torch
import yaml

from services import tune as tune_cli
from services.checkpoints.store import latest_valid
from services.search.space import parse_space

pytest.importorskip("ray.tune")

TINY = [
    "collector.num_collectors=1",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=128",
    "replay.num_shards=1",
    "controller.init_random_frames=500",
    "collector.epsilon_anneal_frames=2000",
    "controller.log_interval_s=1",
    "controller.utd_ratio=0.25",
    "learner.resources_per_rank={CPU: 0.5}",
]
SETS = [arg for item in TINY for arg in ("--set", item)]


def space_file(tmp_path: Path, space: dict) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return str(path)


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def rows(tune_dir: Path) -> list[dict]:
    with open(tune_dir / "trials.csv") as file:
        return list(csv.DictReader(file))


def test_asha_stops_a_trial_that_cannot_learn_and_the_best_trial_learns(
    ray_cluster, tmp_path, capsys
):
    bad = 0.5  # Adam at 0.5: the Q-network diverges, the greedy policy never balances
    space = space_file(tmp_path, {"learner.lr": [1e-3, 2e-3, 3e-3, bad]})
    tune_dir = tmp_path / "asha"
    # One trial at a time, the bad one last: every rung it reaches already holds the earlier
    # trials' values (run at once, a trial first at a rung passes it with nothing to compare).
    argv = [
        "--space",
        space,
        "--scheduler",
        "asha",
        "--max-frames",
        "6000",
        "--max-concurrent",
        "1",
    ]
    argv += ["--perturbation-frames", "750", "--dir", str(tune_dir), *SETS]  # rungs 750 .. 6000
    assert tune_cli.main(argv) == 0
    final = last_json(capsys)
    assert final["dir"] == str(tune_dir) and final["trials"] == 4 and final["exploits"] == 0
    trials = {float(r["learner.lr"]): r for r in rows(tune_dir)}
    assert trials[bad]["stopped_early"] == "True" and int(trials[bad]["frames"]) < 6000
    assert final["stopped_early"] >= 1
    best = json.loads((tune_dir / "best.json").read_text())
    assert best["config"]["learner"]["lr"] != bad and best["run_dir"] == final["best_run_dir"]
    assert final["best_return"] == best["value"] > float(trials[bad]["last"]) + 10
    assert latest_valid(best["checkpoint"])[0] == Path(best["checkpoint"])
    run_dirs = {r["run_dir"] for r in trials.values()}
    assert len(run_dirs) == 4 and all(Path(d).parent == tune_dir for d in run_dirs)
    assert all((Path(d) / "summary.json").exists() for d in run_dirs)  # each a whole run
    assert (tune_dir / "return_vs_frames.png").read_bytes()[:4] == b"\x89PNG"
    assert (tune_dir / "lineage.jsonl").read_text() == ""


class InterruptAfterFirstExploit:
    """A Tune callback: SIGUSR1 (Tune's clean stop, like Ctrl-C) once an exploit is logged.

    Tune keeps its callbacks in the experiment state, so the resumed search has it too: a
    marker file makes it fire once.
    """

    def __init__(self, tune_dir: Path) -> None:
        from ray.tune import Callback

        self.lineage = tune_dir / "lineage.jsonl"
        self.marker = tune_dir / "interrupt-sent"
        self.__class__ = type("Interrupt", (InterruptAfterFirstExploit, Callback), {})

    def on_trial_result(self, iteration, trials, trial, result, **info):
        exploited = self.lineage.exists() and self.lineage.stat().st_size > 0
        if exploited and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGUSR1)


def optimizer_lr(checkpoint: Path) -> float:
    state = torch.load(checkpoint / "learner-0.pt", weights_only=True)
    return state["stepper"]["optimizer"]["param_groups"][0]["lr"]


def test_pbt_exploits_with_the_mutated_lr_applied_and_an_interrupted_search_resumes(
    ray_cluster, tmp_path, capsys
):
    # epsilon_end 1.0 acts at random forever: that trial is the bottom one, so it exploits.
    space = {"learner.lr": {"loguniform": [5e-4, 5e-3]}, "collector.epsilon_end": [1.0, 0.01]}
    tune_dir = tmp_path / "pbt"
    argv = ["--space", space_file(tmp_path, space), "--scheduler", "pbt", "--num-samples", "1"]
    argv += ["--max-frames", "6000", "--perturbation-frames", "750", "--dir", str(tune_dir)]
    callback = InterruptAfterFirstExploit(tune_dir)
    sets = [*SETS, "--set", "controller.log_interval_s=0.5"]
    assert tune_cli.main([*argv, *sets], callbacks=[callback]) == 130
    interrupted = last_json(capsys)
    assert interrupted["interrupted"] and interrupted["exploits"] >= 1

    assert tune_cli.main(["--resume", str(tune_dir)]) == 0
    final = last_json(capsys)
    assert not final["interrupted"] and final["trials"] == 2 and final["exploits"] >= 1
    assert all(int(r["frames"]) >= 6000 for r in rows(tune_dir))  # both ran to the budget

    lineage = [json.loads(line) for line in (tune_dir / "lineage.jsonl").read_text().splitlines()]
    exploit = lineage[0]
    assert exploit["donor"] != exploit["receiver"] and exploit["frame"] > 0
    mutated = exploit["mutation"]["learner.lr"]
    # The receiver's next run resumed the donor's checkpoint: its lineage names the donor's run,
    # its frames continue from the donor's, its optimizer runs at the mutated lr.
    summaries = [json.loads(p.read_text()) for p in tune_dir.glob("relayrl-*/summary.json")]
    (receiver,) = [
        s
        for s in summaries
        if exploit["donor_run_id"] in s["lineage"]
        and yaml.safe_load((Path(s["run_dir"]) / "config.yaml").read_text())["learner"]["lr"]
        == mutated
    ][:1]
    checkpoints = sorted((Path(receiver["run_dir"]) / "checkpoints").glob("ckpt-*"))
    assert checkpoints and optimizer_lr(checkpoints[0]) == pytest.approx(mutated)
    first_frames = json.loads((checkpoints[0] / "driver.json").read_text())["counters"]
    assert first_frames["collected_frames"] > exploit["frame"]


@pytest.mark.parametrize(
    ("space", "scheduler", "field"),
    [
        ({"learner.hidden_sizes": [[64], [128]]}, "pbt", "learner.hidden_sizes"),
        ({"collector.env_id": ["CartPole-v1", "Acrobot-v1"]}, "pb2", "collector.env_id"),
        ({"learner.lr": {"gaussian": [0, 1]}}, "asha", "learner.lr"),
        ({"learner.nope": [1, 2]}, "fifo", "learner.nope"),
        ({"learner.world_size": [1, 0]}, "fifo", "learner.world_size"),
        ({"controller.total_frames": [1, 2]}, "fifo", "controller.total_frames"),
        ({"learner.lr": [1e-3, 1e-4]}, "pb2", "learner.lr"),
    ],
)
def test_a_space_that_cannot_be_searched_is_refused_before_anything_starts(
    space, scheduler, field, tmp_path, capsys
):
    argv = ["--space", space_file(tmp_path, space), "--scheduler", scheduler]
    assert tune_cli.main([*argv, "--dir", str(tmp_path / "t")]) == 2
    (message,) = capsys.readouterr().err.strip().splitlines()
    assert field in message, message
    assert not (tmp_path / "t").exists()


def test_a_space_file_reads_distributions_lists_and_constants():
    space = parse_space(
        {
            "learner.lr": {"loguniform": [1e-5, 1e-2]},
            "learner.onpolicy.ent_coef": [0.0, 0.01],
            "learner.global_batch_size": {"choice": [32, 64]},
            "controller.utd_ratio": {"uniform": [0.25, 1]},
            "seed": 3,
        }
    )
    kinds = {d.key: (d.kind, d.values) for d in space}
    assert kinds["learner.lr"] == ("loguniform", (1e-5, 1e-2))
    assert kinds["learner.onpolicy.ent_coef"] == ("grid", (0.0, 0.01))
    assert kinds["learner.global_batch_size"] == ("choice", (32, 64))
    assert kinds["controller.utd_ratio"] == ("uniform", (0.25, 1.0))
    assert kinds["seed"] == ("constant", (3,))
