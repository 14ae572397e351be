"""Prometheus metrics served by the driver (prefix ``relayrl_``).

The exporter owns its own registry and is fed by controller hooks, so nothing in the hot loop
waits on it. ``METRICS`` lists every exported name with its type and help; the README's metrics
table is generated from the same list.
"""

from __future__ import annotations

import logging
import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

logger = logging.getLogger(__name__)

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
    ("rollouts_total", "counter", ("collector",), "Counted rollout receipts per collector."),
    (
        "collector_restarts_total",
        "counter",
        (),
        "Collector deaths (each restarted by Ray; its rollout is not counted).",
    ),
    ("episodes_total", "counter", (), "Finished episodes."),
    ("model_version", "gauge", (), "Learner model version (optimizer steps in the lineage)."),
    ("published_version", "gauge", (), "Version of the newest published weights."),
    ("learner_generation", "gauge", (), "Current learner generation."),
    ("episode_return", "gauge", (), "Mean return of the recent episode window."),
    ("episode_length", "gauge", (), "Mean length of the recent episode window."),
    ("epsilon", "gauge", (), "Exploration rate handed to collectors."),
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
    ("checkpoint_last_success_timestamp_seconds", "gauge", (), "Unix time of the last checkpoint."),
    (
        "policy_lag_versions",
        "histogram",
        (),
        "Learner version minus the policy version that collected a rollout.",
    ),
    ("rollout_latency_seconds", "histogram", (), "Wall time of one rollout call, writes included."),
    ("step_latency_seconds", "histogram", (), "Wall time of one learner round on rank 0."),
)


def exported_name(name: str) -> str:
    """The name a scrape shows for an entry of ``METRICS`` (histograms add _bucket/_sum/_count)."""
    return f"relayrl_{name}"


def metrics_table() -> str:
    """The README's metrics table, in Markdown."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for name, kind, labels, help_text in METRICS:
        rows.append(
            f"| `{exported_name(name)}` | {kind} | {', '.join(labels) or '-'} | {help_text} |"
        )
    return "\n".join(rows)


class MetricsExporter:
    """Holds the metric objects and serves them over HTTP.

    Args:
        host: Bind address of the HTTP server.
        port: Port; 0 lets the OS choose.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = CollectorRegistry()
        self._seen: dict[tuple, float] = {}
        self.metrics = {}
        for name, kind, labels, help_text in METRICS:
            full = (
                f"relayrl_{name.removesuffix('_total')}" if kind == "counter" else f"relayrl_{name}"
            )
            if kind == "counter":
                metric = Counter(full, help_text, labels, registry=self.registry)
            elif kind == "gauge":
                metric = Gauge(full, help_text, labels, registry=self.registry)
            else:
                buckets = (
                    (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
                    if "lag" in name
                    else (LATENCY_BUCKETS)
                )
                metric = Histogram(full, help_text, labels, buckets=buckets, registry=self.registry)
            self.metrics[name] = metric
        self.server, self.thread = start_http_server(port, addr=host, registry=self.registry)
        self.host, self.port = host, self.server.server_port
        logger.info("Prometheus metrics at http://%s:%d/metrics", self.host, self.port)

    @property
    def url(self) -> str:
        """The scrape URL."""
        return f"http://{self.host}:{self.port}/metrics"

    def attach(self, controller) -> None:
        """Registers the hooks that keep the metrics current."""
        controller.register("rollout", self.on_rollout)
        controller.register("external", self.on_external)
        controller.register("round", self.on_round)
        controller.register("progress", self.on_progress)
        controller.register("checkpoint", self.on_checkpoint)

    def on_rollout(self, controller, receipt) -> None:
        """Counts one rollout receipt."""
        m = self.metrics
        m["frames_total"].labels(source="collector").inc(
            receipt.frames * controller.config.collector.frame_skip
        )
        m["transitions_total"].labels(source="collector").inc(receipt.frames)
        m["rollouts_total"].labels(collector=str(receipt.collector_id)).inc()
        m["episodes_total"].inc(len(receipt.episode_returns))
        m["rollout_latency_seconds"].observe(receipt.rollout_s + receipt.write_s)
        if receipt.policy_version >= 0:
            lag = controller.counters.model_version - receipt.policy_version
            m["policy_lag_versions"].observe(max(lag, 0))

    def on_external(self, controller, receipt) -> None:
        """Counts one external actor's batch (gRPC), like a rollout's frames."""
        m = self.metrics
        m["frames_total"].labels(source="external").inc(
            receipt.frames * controller.config.collector.frame_skip
        )
        m["transitions_total"].labels(source="external").inc(receipt.frames)
        m["episodes_total"].inc(len(receipt.episode_returns))

    def on_round(self, controller, receipt) -> None:
        """Counts one learner round."""
        m = self.metrics
        m["optim_steps_total"].inc(receipt.optim_steps)
        m["model_version"].set(receipt.model_version)
        m["step_latency_seconds"].observe(receipt.sample_s + receipt.train_s)
        for term, value in receipt.metrics.items():
            if math.isfinite(value):
                m["loss"].labels(term=term).set(value)

    def on_progress(self, controller, snapshot: dict) -> None:
        """Refreshes gauges from a progress snapshot."""
        m = self.metrics
        c = controller.counters
        m["published_version"].set(c.published_version)
        m["learner_generation"].set(c.generation)
        m["epsilon"].set(snapshot["epsilon"])
        m["frames_per_second"].set(snapshot["frames_per_s"])
        m["updates_per_second"].set(snapshot["updates_per_s"])
        m["update_to_data_ratio"].set(c.optim_steps / max(c.collected_frames, 1))
        self._advance("collector_restarts_total", c.collector_failures)
        for shard in snapshot.get("replay", []):
            label = str(shard["shard_id"])
            m["replay_size"].labels(shard=label).set(shard["size"])
            self._advance("replay_inserts_total", shard["write_count"], shard=label)
            self._advance("replay_samples_total", shard["sample_count"], shard=label)
            self._advance(
                "replay_priority_updates_total", shard.get("priority_updates", 0), shard=label
            )
        for key, name in (
            ("episode_return_mean", "episode_return"),
            ("episode_length_mean", "episode_length"),
        ):
            if not math.isnan(snapshot[key]):
                m[name].set(snapshot[key])

    def on_checkpoint(self, controller, path, seconds: float) -> None:
        """Records a successful checkpoint."""
        self.metrics["checkpoint_duration_seconds"].set(seconds)
        self.metrics["checkpoint_last_success_timestamp_seconds"].set_to_current_time()

    def _advance(self, name: str, total: float, **labels: str) -> None:
        """Moves a counter up to an absolute ``total`` reported by a component."""
        key = (name, tuple(sorted(labels.items())))
        delta = total - self._seen.get(key, 0)
        if delta > 0:
            metric = self.metrics[name]
            (metric.labels(**labels) if labels else metric).inc(delta)
            self._seen[key] = total

    def close(self) -> None:
        """Stops the HTTP server."""
        self.server.shutdown()
        self.server.server_close()
