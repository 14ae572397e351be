"""Start-up measures hold: the embedded Ray's actors start in workers that have torch already.

``services.train.init_ray`` makes Ray prestart one worker process per actor of the run, each
importing torch as the cluster starts (``PRELOAD_MODULES``), so no actor imports it on the run's
critical path. If either half goes, a regression shows here rather than as a slower
``startup_s`` on a noisy machine.
"""

import json
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT, cli_env

PROBE = """
import json, sys
import ray
from services.config import load_config
from services.train import actor_count, init_ray

config = load_config()
init_ray(config)

@ray.remote(num_cpus=0.5)
class Probe:
    def __init__(self):
        self.torch_first = "torch" in sys.modules  # before this actor imported anything

    def report(self):
        return self.torch_first

probes = [Probe.remote() for _ in range(actor_count(config))]
print(json.dumps({
    "torch_first": ray.get([p.report.remote() for p in probes]),
    "cpus": ray.cluster_resources()["CPU"],
    "actors": actor_count(config),
}))
"""


@pytest.mark.slow
def test_actors_start_in_prestarted_workers_that_imported_torch():
    result = subprocess.run(
        [PYTHON, "-c", PROBE], cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["actors"] == 5  # the default run: 2 collectors, 2 shards, 1 learner rank
    assert report["cpus"] >= report["actors"]  # Ray prestarts one worker per logical CPU
    assert report["torch_first"] == [True] * report["actors"]
