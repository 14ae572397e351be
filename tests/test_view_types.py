"""The driver's views hold under the type check CI runs (``mypy``, ``[tool.mypy]``).

One ``mypy`` run over two snippets: the controller assigned to every view (must check clean)
and a part that reads more than its view names (must fail, naming the reads).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from services.driver import views

pytestmark = pytest.mark.e2e  # a mypy subprocess over the driver's imports

ROOT = Path(__file__).resolve().parents[1]
VIEWS = sorted(
    name
    for name, view in inspect.getmembers(views, inspect.isclass)
    if view.__module__ == views.__name__ and name != "Loop"
)

SATISFIED = "\n".join(
    [
        "from services.checkpoints.cut import checkpoint_now",
        "from services.driver import views",
        "from services.driver.controller import Controller",
        "",
        "def cut(controller: Controller) -> None:",
        "    checkpoint_now(controller)",
        "",
        *(
            f"def as_{name}(controller: Controller) -> views.{name}:\n    return controller\n"
            for name in VIEWS
        ),
    ]
)

LIES = textwrap.dedent(
    """
    from services.driver.views import CutView

    def cut(controller: CutView) -> None:
        controller.elastic.resize
        controller.inbox.poll
    """
)


def test_the_controller_satisfies_each_view_and_a_lying_view_fails(tmp_path):
    assert len(VIEWS) >= 10
    (tmp_path / "satisfied.py").write_text(SATISFIED)
    (tmp_path / "lies.py").write_text(LIES)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")),
            *("--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary"),
            *(str(tmp_path / "satisfied.py"), str(tmp_path / "lies.py")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    assert not [e for e in errors if "satisfied.py" in e], "\n".join(errors)
    lies = "\n".join(e for e in errors if "lies.py" in e)
    assert '"CutView" has no attribute "elastic"' in lies, lies
    assert 'has no attribute "poll"' in lies, lies
