"""What the driver exports to Prometheus: every metric's name, type, labels and help.

``METRICS`` lists every exported name (prefix ``relayrl_``); the exporter
(``services.observe.metrics``) creates them, and the metrics table of ``docs/metrics.md`` is
generated from the same list (:func:`metrics_table`).
"""

from __future__ import annotations

RUN_LABEL = "run"
SOURCES = ("collector", "external")
SHARD_METRICS = (
    "replay_size",
    "replay_inserts_total",
    "replay_samples_total",
    "replay_priority_updates_total",
)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# name (without prefix), type, labels, help
METRICS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "frames_total",
        "counter",
        ("source",),
        "Frames collected, counted from receipts (source: collector or external).",
    ),
    ("transitions_total", "counter", ("source",), "Transitions written to replay."),
    ("optim_steps_total", "counter", (), "Optimizer steps done by the learner group."),
    (
        "rollouts_total",
        "counter",
        ("collector", "node"),
        "Counted rollout receipts per collector and its node; past metrics.max_collector_series "
        'collectors, per node only (collector="").',
    ),
    (
        "collector_restarts_total",
        "counter",
        (),
        "Collector deaths (each restarted by Ray; its rollout is not counted).",
    ),
    (
        "replay_restarts_total",
        "counter",
        (),
        "Replay shards found restarted by Ray (each refilled from the latest checkpoint).",
    ),
    (
        "replay_items_lost_total",
        "counter",
        (),
        "Items restarted replay shards held at their last health report.",
    ),
    (
        "env_errors_total",
        "counter",
        (),
        "Env exceptions inside rollouts (envs rebuilt, rollout not counted).",
    ),
    (
        "nonfinite_steps_total",
        "counter",
        (),
        "Optimizer steps skipped for a non-finite loss or gradient.",
    ),
    ("episodes_total", "counter", (), "Finished episodes."),
    ("model_version", "gauge", (), "Learner model version (optimizer steps in the lineage)."),
    ("published_version", "gauge", (), "Version of the newest published weights."),
    ("learner_generation", "gauge", (), "Current learner generation."),
    ("episode_return", "gauge", (), "Mean return of the recent episode window."),
    ("episode_length", "gauge", (), "Mean length of the recent episode window."),
    (
        "eval_episode_return",
        "gauge",
        (),
        "Mean return of the last greedy evaluation (evaluation.interval_frames).",
    ),
    ("eval_version", "gauge", (), "Model version the last greedy evaluation used."),
    (
        "exploration",
        "gauge",
        ("param",),
        "Exploration parameters handed to collectors (epsilon; random is 1 during warm-up; "
        "per-collector lists longer than metrics.max_collector_series as their min and max).",
    ),
    ("frames_per_second", "gauge", (), "Collection rate over the last progress interval."),
    ("updates_per_second", "gauge", (), "Optimizer steps per second over the last interval."),
    ("update_to_data_ratio", "gauge", (), "Optimizer steps per collected frame so far."),
    ("replay_size", "gauge", ("shard",), "Transitions held by each replay shard."),
    ("replay_inserts_total", "counter", ("shard",), "Transitions written to each replay shard."),
    ("replay_samples_total", "counter", ("shard",), "Transitions sampled from each replay shard."),
    (
        "replay_priority_updates_total",
        "counter",
        ("shard",),
        "Priority updates applied by each replay shard (prioritized sampling).",
    ),
    ("loss", "gauge", ("term",), "Loss terms and grad norm averaged over the last round."),
    ("checkpoint_duration_seconds", "gauge", (), "Wall time of the last checkpoint."),
    (
        "checkpoint_last_success_timestamp_seconds",
        "gauge",
        (),
        "Unix time of the last checkpoint (the run's start until the first).",
    ),
    (
        "checkpoint_failures_total",
        "counter",
        (),
        "Checkpoints the disk refused (full, I/O error); logged with the path, the run goes on.",
    ),
    (
        "collectors",
        "gauge",
        ("size",),
        'Collector actors: size="current" (collecting) and size="target" (asked by '
        "Control/Scale or followed by collector.num_collectors: auto).",
    ),
    (
        "replay_shards",
        "gauge",
        ("size",),
        'Replay shards: size="current" and size="target".',
    ),
    (
        "learner_world_size",
        "gauge",
        ("size",),
        'Learner ranks (DDP world size): size="current" and size="target".',
    ),
    (
        "resizes_total",
        "counter",
        ("what",),
        "Live resizes done (what: collectors, shards or world_size); each is logged with its "
        "cause and written to metrics.jsonl.",
    ),
    (
        "collectors_dropped_total",
        "counter",
        (),
        "Collectors lost with their node and not re-created (collector.num_collectors: auto).",
    ),
    (
        "policy_lag_versions",
        "histogram",
        (),
        "Learner version minus the policy version that collected a rollout.",
    ),
    (
        "trained_policy_lag_versions",
        "histogram",
        (),
        "Asynchronous loop: learner version minus the policy version that acted, per chunk a "
        "round took (trained or dropped).",
    ),
    (
        "rollouts_dropped_total",
        "counter",
        ("reason",),
        "Asynchronous loop: trajectory chunks (one env's part of a rollout) taken and not "
        "trained on (reason stale: acted more than learner.max_policy_lag versions behind; "
        "lost: taken by a round lost with its learner generation).",
    ),
    (
        "learner_queue_chunks",
        "gauge",
        (),
        "Asynchronous loop: chunks written and not yet taken by a learner round.",
    ),
    (
        "collector_wait_fraction",
        "gauge",
        (),
        "Asynchronous loop: share of the collectors' wall time with no rollout to work on "
        "(waiting for permission to collect while the learner queue is full, or for weights); "
        "a rollout's work is applying newer weights, stepping and sending its replay write.",
    ),
    ("rollout_latency_seconds", "histogram", (), "Wall time of one rollout call, writes included."),
    ("step_latency_seconds", "histogram", (), "Wall time of one learner round on rank 0."),
)


def exported_name(name: str) -> str:
    """The name a scrape shows for an entry of ``METRICS`` (histograms add _bucket/_sum/_count)."""
    return f"relayrl_{name}"


def metrics_table() -> str:
    """The metrics table of ``docs/metrics.md``, in Markdown."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for name, kind, labels, help_text in METRICS:
        shown = ", ".join((RUN_LABEL, *labels))
        rows.append(f"| `{exported_name(name)}` | {kind} | {shown} | {help_text} |")
    return "\n".join(rows)
