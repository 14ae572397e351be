"""R2D2 end to end on the shared local Ray (#39): a CI-sized run on velocity-masked CartPole."""

from tests.test_algorithms_run import run_config


def test_r2d2_learns_stateless_cartpole_from_sequences(ray_cluster, tmp_path):
    # Deterministic (run.deterministic): the asynchronous loop's return at this budget varied
    # with the machine's load (56.75 once in CI); this one is the same every run (107.15).
    summary, _, rounds = run_config(
        "statelesscartpole_r2d2.yaml",
        tmp_path,
        "run.deterministic=true",
        "controller.total_frames=20000",
        "controller.init_random_frames=1000",
        "controller.utd_ratio=0.1",
        "collector.epsilon_anneal_frames=6000",
        "learner.lr=0.002",
    )
    # Frames are the sequences' real steps, each counted once however many sequences hold it.
    assert summary["frames"] == summary["transitions"] >= 20000
    metrics = rounds[-1].metrics
    assert {"loss_q", "q_mean"} <= set(metrics)
    assert summary["optim_steps"] > 1500
    assert summary["episode_return_mean"] > 60, summary  # random play: about 22
