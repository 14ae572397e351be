"""The Ray toolbox during a local run: the logged address lists the run's named actors."""

from services.config import load_config
from services.run.raytools import ClusterAddresses, cluster_addresses


class _Context:
    address_info = {"gcs_address": "127.0.0.1:6379", "webui_url": "127.0.0.1:8265"}
    dashboard_url = "127.0.0.1:8265"


def test_addresses_come_from_the_init_context_and_the_dashboard_can_be_turned_off():
    assert cluster_addresses(_Context()) == ClusterAddresses(
        "127.0.0.1:6379", "http://127.0.0.1:8265"
    )
    assert load_config().ray.dashboard is False  # a run does not use it: off unless asked
    assert load_config(overrides=["ray.dashboard=true"]).ray.dashboard is True


# `ray list actors` at the address a running job logs: tests/test_evaluation_run.py (one run).
