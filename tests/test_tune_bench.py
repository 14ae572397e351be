"""``python -m services.bench tune`` at CI size: PBT and random search figures in its JSON line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.bench.__main__ import main as bench_main
from services.bench.learning.tune import account, compare

pytest.importorskip("ray.tune")

TINY = [
    "collector.num_collectors=1",
    "collector.envs_per_collector=4",
    "collector.rollout_frames=256",
    "controller.log_interval_s=0.5",
    "learner.resources_per_rank={CPU: 0.5}",
]


def test_frames_spent_count_an_exploit_from_the_donors_frames_and_the_threshold_once():
    results = [
        {"time": 1.0, "trial": "a", "frames": 100, "return": 10.0},
        {"time": 2.0, "trial": "b", "frames": 100, "return": 50.0},
        {"time": 4.0, "trial": "a", "frames": 300, "return": 210.0},  # resumed b's 100
        {"time": 5.0, "trial": "b", "frames": 200, "return": 250.0},
    ]
    exploit = {"time": 3.0, "receiver": "a", "donor": "b", "frame": 100}
    found = account(results, [exploit], 200.0, start=0.0)
    assert found["frames_spent"] == 100 + 100 + 200 + 100
    assert found["search_frames_to_threshold"] == 400 and found["trial_to_threshold"] == "a"
    assert found["trial_frames_to_threshold"] == 300 and found["wall_s_to_threshold"] == 4.0
    assert account(results, [], 300.0)["search_frames_to_threshold"] is None
    random_ = {"search_frames_to_threshold": None, "best_return": 150.0}
    pbt = {"search_frames_to_threshold": 400, "best_return": 140.0}
    assert compare(random_, pbt) == {
        "pbt_over_random_frames_to_threshold": None,
        "pbt_minus_random_best_return": -10.0,
        "target_met": True,  # PBT reached it and the random search did not
    }


def test_the_bench_runs_both_searches_from_the_same_samples(ray_cluster, tmp_path, capsys):
    argv = ["tune", "--config", "deploy/configs/cartpole_ppo.yaml", "--threshold", "5"]
    # 1,024 frames a trial (4 PPO iterations of 256) with one perturbation point, at 512: what
    # is checked is the bench's accounting and its two searches' shared samples, not learning
    # (any episode of CartPole returns more than the threshold of 5).
    argv += ["--population", "2", "--frames-per-trial", "1024", "--perturbation-frames", "512"]
    argv += ["--out", str(tmp_path)]  # both trials at once (the default)
    argv += [arg for item in TINY for arg in ("--set", item)]
    assert bench_main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name, scheduler in (("random", "fifo"), ("pbt", "pbt")):
        search = report[name]
        assert search["scheduler"] == scheduler and search["trials"] == 2, name
        assert search["live_population"] == 2, name
        assert not search["errors"], name
        # an exploited trial continues from its donor's frames instead of spending its own
        spent_at_least = 2 * 1024 if name == "random" else 1024
        assert search["frames_spent"] >= spent_at_least, name
        assert search["search_frames_to_threshold"] <= search["frames_spent"], name  # reached 5
        assert isinstance(search["best_return"], float), name
        assert search["mean_final_return"] <= search["best_return"], name
        assert Path(search["dir"], "trials.csv").exists(), name
        assert all(t["final_frames"] >= 1024 for t in search["per_trial"].values()), name
    random_ = report["random"]
    assert random_["trial_frames_to_threshold"] <= random_["search_frames_to_threshold"]
    assert random_["exploits"] == 0 and report["pbt"]["exploits"] >= 0
    initial = {
        name: sorted(json.dumps(t["initial"]) for t in report[name]["per_trial"].values())
        for name in ("random", "pbt")
    }
    assert initial["random"] == initial["pbt"]  # the sampler seeded alike
    assert isinstance(report["target_met"], bool)
    assert report["pbt_minus_random_best_return"] == pytest.approx(
        report["pbt"]["best_return"] - report["random"]["best_return"], abs=0.01
    )
    assert json.loads((tmp_path / "report.json").read_text())["threshold"] == 5.0
