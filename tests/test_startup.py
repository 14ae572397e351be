"""Start-up measures hold (``docs/benchmarks.md``, "Start-up"): what the driver does not load.

Start-up on a small machine is bound by the CPU work of every process the run starts, so the
measures that held up remove work: the embedded Ray starts no dashboard unless asked, and the
driver does not import tensordict (nor ``torch._dynamo``, which tensordict pulls in): only the
learner ranks, which train on TensorDicts, load them. A regression shows here, not as a slower
``startup_s`` on a noisy machine. (The dashboard's default: ``tests/test_raytools.py``; a run's
log saying ``dashboard off``: ``tests/test_observability.py``.)
"""

import json
import subprocess

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
