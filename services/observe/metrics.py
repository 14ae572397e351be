"""Prometheus metrics served by the driver (prefix ``relayrl_``).

The exporter owns its own registry and is fed by controller hooks, so nothing in the hot loop
waits on it. ``METRICS`` lists every exported name with its type and help; the metrics table of
``docs/metrics.md`` is generated from the same list.

Every series carries a ``run`` label (the run id, see ``services.driver.runid``), so one Prometheus
scraping several runs, on one machine or a shared cluster, keeps them apart; each run serves its
own endpoint (port 0: OS-chosen). Every series whose labels the run's config fixes exists from
the moment the exporter is attached, at 0 (so a dashboard panel shows 0, not "No data", until
the first event): the unlabelled ones, both ``source`` values, every replay shard, the
``nonfinite_skipped`` learner term; the last checkpoint's timestamp starts at the run's start.

Cardinality stays bounded at fleet scale: ``rollouts_total`` carries ``collector`` and
``node`` labels while a run has at most ``metrics.max_collector_series`` collectors; past that,
one series per node (``collector=""``) sums its collectors, and a per-collector exploration
list (Ape-X epsilons) is exported as its min and max. Hot-path series are looked up once, not
per receipt. With ``metrics.sd_dir`` the exporter also writes
``<sd_dir>/<run id>.json``, a Prometheus ``file_sd`` target for its endpoint, and removes it
when it closes, so Prometheus finds every live run without fixed ports.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.observe.catalog import (  # noqa: F401  (re-exported: the exporter's names)
    LATENCY_BUCKETS,
    METRICS,
    RUN_LABEL,
    SHARD_METRICS,
    SOURCES,
    exported_name,
    metrics_table,
)
from services.observe.nodes import node_labels
from services.observe.scrape import start_metrics_server

# snapshot["sizes"][kind] key -> metric name
SIZE_METRICS = {
    "collectors": "collectors",
    "shards": "replay_shards",
    "world_size": "learner_world_size",
}

if TYPE_CHECKING:
    from services.driver.views import Counted, MetricsHost

logger = logging.getLogger(__name__)


class MetricsExporter:
    """Holds the metric objects and serves them over HTTP.

    Args:
        host: Bind address of the HTTP server.
        port: Port; 0 lets the OS choose.

    Keyword Args:
        run_id: Value of the ``run`` label on every series.
        sd_dir: Directory for a Prometheus ``file_sd`` target file (None: none written).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        run_id: str = "relayrl",
        sd_dir: str | Path | None = None,
    ) -> None:
        self.run_id = run_id
        self.frame_skip = 1  # the run's collector.frame_skip, set by attach()
        self.max_collector_series = 64  # the run's metrics.max_collector_series, set by attach()
        self.registry = CollectorRegistry()
        self._seen: dict[tuple, float] = {}
        self._collector_series: dict[int, object] = {}  # rollouts_total child per collector
        self._hot: tuple | None = None  # the series every receipt moves (set by zero())
        self.metrics = {}
        for name, kind, labels, help_text in METRICS:
            full = (
                f"relayrl_{name.removesuffix('_total')}" if kind == "counter" else f"relayrl_{name}"
            )
            if kind == "counter":
                metric = Counter(full, help_text, (RUN_LABEL, *labels), registry=self.registry)
            elif kind == "gauge":
                metric = Gauge(full, help_text, (RUN_LABEL, *labels), registry=self.registry)
            else:
                buckets = (
                    (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
                    if "lag" in name
                    else (LATENCY_BUCKETS)
                )
                metric = Histogram(
                    full, help_text, (RUN_LABEL, *labels), buckets=buckets, registry=self.registry
                )
            self.metrics[name] = metric
        self.server, self.thread = start_metrics_server(host, port, self.registry)
        self.host, self.port = host, self.server.server_port
        logger.info("Prometheus metrics of run %s at %s", run_id, self.url)
        self.sd_file = self._write_sd_file(Path(sd_dir)) if sd_dir else None

    def _write_sd_file(self, sd_dir: Path) -> Path:
        """Writes this endpoint as a ``file_sd`` target (atomically: Prometheus watches it)."""
        sd_dir.mkdir(parents=True, exist_ok=True)
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        target = [{"targets": [f"{host}:{self.port}"], "labels": {"component": "driver"}}]
        path = sd_dir / f"{self.run_id}.json"
        staging = sd_dir / f".{self.run_id}.json.tmp"
        staging.write_text(json.dumps(target))
        os.replace(staging, path)
        return path

    def m(self, name: str, **labels: str):
        """The series of metric ``name`` for this run (and ``labels``)."""
        return self.metrics[name].labels(**{RUN_LABEL: self.run_id}, **labels)

    @property
    def url(self) -> str:
        """The scrape URL."""
        return f"http://{self.host}:{self.port}/metrics"

    def attach(self, controller: MetricsHost) -> None:
        """Registers the hooks that keep the metrics current; every known series starts at 0."""
        config = controller.config
        self.frame_skip = config.collector.frame_skip
        self.max_collector_series = config.metrics.max_collector_series
        self.zero(config.replay.num_shards)
        controller.register("setup", self.on_setup)
        controller.register("rollout", self.on_rollout)
        controller.register("external", self.on_external)
        controller.register("round", self.on_round)
        controller.register("progress", self.on_progress)
        controller.register("checkpoint", self.on_checkpoint)
        controller.register("checkpoint_failed", self.on_checkpoint_failed)
        controller.register("resize", self.on_resize)

    def zero(self, num_shards: int) -> None:
        """Creates every series whose labels are known before the run starts, at 0."""
        for name, _, labels, _ in METRICS:
            if not labels:
                self.m(name)
        for source in SOURCES:
            self.m("frames_total", source=source)
            self.m("transitions_total", source=source)
        for shard in range(num_shards):
            for name in SHARD_METRICS:
                self.m(name, shard=str(shard))
        self.m("loss", term="nonfinite_skipped")  # every stepper reports it
        self.m("checkpoint_last_success_timestamp_seconds").set_to_current_time()
        self._hot = (
            self.m("frames_total", source="collector"),
            self.m("transitions_total", source="collector"),
            self.m("episodes_total"),
            self.m("rollout_latency_seconds"),
            self.m("policy_lag_versions"),
        )

    def on_setup(self, controller: MetricsHost) -> None:
        """The collectors answer: their ``rollouts_total`` series, per collector or per node."""
        collectors = controller.collectors
        nodes = node_labels(collectors.nodes if collectors is not None else [])
        aggregate = len(nodes) > self.max_collector_series
        self._collector_series = {
            index: self.m("rollouts_total", collector="" if aggregate else str(index), node=node)
            for index, node in enumerate(nodes)
        }

    def _rollouts_series(self, collector_id: int):
        series = self._collector_series.get(collector_id)
        if series is None:  # not attached to a run: per collector, node unknown
            series = self.m("rollouts_total", collector=str(collector_id), node="")
            self._collector_series[collector_id] = series
        return series

    def on_rollout(self, controller: Counted, receipt) -> None:
        """Counts one rollout receipt (series looked up once, in :meth:`zero`)."""
        if self._hot is None:
            self.zero(0)
        frames, transitions, episodes, latency, lag = self._hot
        frames.inc(receipt.frames * self.frame_skip)
        transitions.inc(receipt.frames)
        self._rollouts_series(receipt.collector_id).inc()
        if receipt.episode_returns:
            episodes.inc(len(receipt.episode_returns))
        latency.observe(receipt.rollout_s + receipt.write_s)
        if receipt.policy_version >= 0:
            lag.observe(max(controller.counters.model_version - receipt.policy_version, 0))

    def on_external(self, controller: Counted, receipt) -> None:
        """Counts one external actor's batch (gRPC), like a rollout's frames."""
        m = self.m
        m("frames_total", source="external").inc(receipt.frames * self.frame_skip)
        m("transitions_total", source="external").inc(receipt.frames)
        m("episodes_total").inc(len(receipt.episode_returns))

    def on_round(self, controller: Counted, receipt) -> None:
        """Counts one learner round."""
        m = self.m
        m("optim_steps_total").inc(receipt.optim_steps)
        m("model_version").set(receipt.model_version)
        m("step_latency_seconds").observe(receipt.sample_s + receipt.train_s)
        for term, value in receipt.metrics.items():
            if math.isfinite(value):
                m("loss", term=term).set(value)
        if receipt.lags:  # an asynchronous round: chunks per policy lag, the last bin dropped
            histogram = m("trained_policy_lag_versions")
            for lag, count in enumerate(receipt.lags):
                for _ in range(count):
                    histogram.observe(lag)
            m("rollouts_dropped_total", reason="stale").inc(receipt.lags[-1])

    def on_progress(self, controller: Counted, snapshot: dict) -> None:
        """Refreshes gauges from a progress snapshot."""
        m = self.m
        c = controller.counters
        m("published_version").set(c.published_version)
        m("learner_generation").set(c.generation)
        self.metrics["exploration"].clear()
        for param, value in snapshot.get("exploration", {}).items():
            if isinstance(value, list | tuple) and len(value) > self.max_collector_series:
                m("exploration", param=f"{param}[min]").set(float(min(value)))
                m("exploration", param=f"{param}[max]").set(float(max(value)))
            elif isinstance(value, list | tuple):  # one per collector: param="epsilons[3]"
                for index, item in enumerate(value):
                    m("exploration", param=f"{param}[{index}]").set(float(item))
            else:
                m("exploration", param=param).set(float(value))
        self._sizes(snapshot.get("sizes", {}))
        self._advance("collectors_dropped_total", snapshot.get("collectors_dropped", 0))
        if "items_lost" in snapshot:  # the asynchronous loop's: chunks of lost rounds
            self._advance("rollouts_dropped_total", snapshot["items_lost"], reason="lost")
        for key, name in (
            ("queued_chunks", "learner_queue_chunks"),
            ("collector_wait_fraction", "collector_wait_fraction"),
        ):
            if key in snapshot:  # the asynchronous loop's
                m(name).set(snapshot[key])
        m("frames_per_second").set(snapshot["frames_per_s"])
        m("updates_per_second").set(snapshot["updates_per_s"])
        m("update_to_data_ratio").set(c.optim_steps / max(c.collected_frames, 1))
        self._advance("collector_restarts_total", c.collector_failures)
        self._advance("replay_restarts_total", c.replay_restarts)
        self._advance("replay_items_lost_total", c.replay_items_lost)
        self._advance("env_errors_total", c.env_errors)
        self._advance("nonfinite_steps_total", c.nonfinite_steps)
        for shard in snapshot.get("replay", []):
            label = str(shard["shard_id"])
            m("replay_size", shard=label).set(shard["size"])
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
                m(name).set(snapshot[key])
        evaluation = snapshot.get("evaluation")
        if evaluation:
            m("eval_episode_return").set(evaluation["episode_return_mean"])
            m("eval_version").set(evaluation["version"])

    def on_resize(self, controller: Counted, event: dict) -> None:
        """Counts a live resize (``services.driver.elastic``)."""
        self.m("resizes_total", what=event["what"]).inc()

    def _sizes(self, sizes: dict) -> None:
        """The current and target sizes of a progress snapshot's ``sizes``."""
        for kind, values in sizes.items():
            for key, name in SIZE_METRICS.items():
                self.m(name, size=kind).set(values[key])

    def on_checkpoint(self, controller: Counted, path, seconds: float) -> None:
        """Records a successful checkpoint."""
        self.m("checkpoint_duration_seconds").set(seconds)
        self.m("checkpoint_last_success_timestamp_seconds").set_to_current_time()

    def on_checkpoint_failed(self, controller: Counted, error) -> None:
        """Counts a checkpoint the disk refused."""
        self.m("checkpoint_failures_total").inc()

    def _advance(self, name: str, total: float, **labels: str) -> None:
        """Moves a counter up to an absolute ``total`` reported by a component."""
        key = (name, tuple(sorted(labels.items())))
        delta = total - self._seen.get(key, 0)
        if delta > 0:
            self.m(name, **labels).inc(delta)
            self._seen[key] = total

    def close(self) -> None:
        """Stops the HTTP server and removes the ``file_sd`` target file, if any."""
        self.server.shutdown()
        self.server.server_close()
        if self.sd_file is not None:
            self.sd_file.unlink(missing_ok=True)
            self.sd_file = None
