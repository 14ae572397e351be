"""Start-up measures hold (``docs/benchmarks.md``, "Start-up"): what the driver does not load.

Start-up on a small machine is bound by the CPU work of every process the run starts, so the
measures that held up remove work: the embedded Ray starts no dashboard unless asked, and the
driver does not import tensordict (nor ``torch._dynamo``, which tensordict pulls in): only the
learner ranks, which train on TensorDicts, load them. A regression shows here, not as a slower
``startup_s`` on a noisy machine. A run also starts at once beside another Ray cluster on the
machine (the OS chooses its dashboard agent's port). (The dashboard's default:
``tests/test_raytools.py``; a run's log saying ``dashboard off``: ``tests/test_observability.py``.)
"""

import contextlib
import json
import socket
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT, cli_env

PROBE = """
import json, sys
import services.train, services.run.launch  # what the CLI imports before its first rollout
from services.driver.loops import LOOPS
print(json.dumps(sorted(m for m in ("tensordict", "torch._dynamo") if m in sys.modules)))
"""


def test_the_driver_imports_neither_tensordict_nor_dynamo():
    result = subprocess.run(
        [PYTHON, "-c", PROBE], cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


AGENT_PROBE = """
import json, ray
from services.config import load_config
from services.run.embedded import init_ray

init_ray(load_config())
print(json.dumps(ray._private.worker._global_node.dashboard_agent_listen_port))
ray.shutdown()
"""


@pytest.mark.slow
def test_a_run_starts_beside_a_cluster_holding_rays_fixed_agent_port():
    # Another cluster on the machine holding 52365 made the agent retry for about 3 s and then
    # run without its HTTP server (port -1); with an OS-chosen port it starts at once.
    holder = socket.socket()
    with contextlib.suppress(OSError):  # already held (another cluster here): as good
        holder.bind(("0.0.0.0", 52365))
        holder.listen()
    try:
        result = subprocess.run(
            [PYTHON, "-c", AGENT_PROBE],
            cwd=ROOT,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        holder.close()
    assert result.returncode == 0, result.stderr[-2000:]
    port = json.loads(result.stdout.strip().splitlines()[-1])
    assert port > 0 and port != 52365
