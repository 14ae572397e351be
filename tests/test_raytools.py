"""The Ray toolbox during a local run: the logged address lists the run's named actors."""

import json
import re
import signal
import subprocess

from services.config import load_config
from services.raytools import ClusterAddresses, cluster_addresses
from tests.conftest import PYTHON, ROOT, cli_env


class _Context:
    address_info = {"gcs_address": "127.0.0.1:6379", "webui_url": "127.0.0.1:8265"}
    dashboard_url = "127.0.0.1:8265"


def test_addresses_come_from_the_init_context_and_the_dashboard_can_be_turned_off():
    assert cluster_addresses(_Context()) == ClusterAddresses(
        "127.0.0.1:6379", "http://127.0.0.1:8265"
    )
    assert load_config().ray.dashboard is True
    assert load_config(overrides=["ray.dashboard=false"]).ray.dashboard is False


def test_ray_list_actors_at_the_logged_address_finds_the_run(tmp_path):
    process = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "services.train",
            "--set",
            "controller.total_frames=10000000",
            "--set",
            "controller.log_interval_s=0.5",
            "--set",
            "checkpoint.at_end=false",
            "--set",
            f"run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    address = dashboard = run_id = None
    tool_env = cli_env()
    try:
        for line in process.stdout:
            lines.append(line)
            found = re.search(r"Ray at (\S+), dashboard (\S+)", line)
            if found:
                address, dashboard = found.groups()
                auth = re.search(r"RAY_AUTH_MODE=(\w+)", line)  # the logged command's env
                if auth:
                    tool_env["RAY_AUTH_MODE"] = auth.group(1)
            found = re.search(r"run id (\S+)", line)
            if found:
                run_id = found.group(1)
            if line.startswith("frames "):  # training: every actor is up
                break
        assert address and run_id, "".join(lines[-20:])
        assert dashboard.startswith("http://127.0.0.1:")
        listed = subprocess.run(
            ["ray", "list", "actors", "--address", address, "--format", "json", "--limit", "1000"],
            env=tool_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert listed.returncode == 0, listed.stderr[-2000:]
        actors = json.loads(listed.stdout)
        names = {a["name"] for a in actors if a["state"] == "ALIVE"}
        expected = {f"{run_id}.collector-{i}" for i in range(2)}
        expected |= {f"{run_id}.replay-{i}" for i in range(2)} | {f"{run_id}.learner-0"}
        assert expected <= names, names
        assert {a["ray_namespace"] for a in actors if a["name"] in expected} == {"relayrl"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, "".join(lines[-20:])
    finally:
        process.kill()
        process.stdout.close()
