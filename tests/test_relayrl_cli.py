"""The ``relayrl`` command: subcommands, help with examples, version, and a fresh install."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from services import cli
from tests.conftest import ROOT, cli_env


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_each_command_has_help_with_examples(name, capsys):
    try:
        code = cli.main([name, "--help"])  # bench answers itself; argparse exits
    except SystemExit as done:
        code = done.code
    assert code == 0
    out = capsys.readouterr().out
    assert f"relayrl {name}" in out and "examples:" in out


def test_version_usage_and_unknown_commands(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"relayrl {cli.version()}"
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)
    assert cli.main([]) == 2
    assert cli.main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_the_python_m_forms_still_work():
    for module in ("services.evaluate", "services.export"):
        result = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=ROOT,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0 and f"python -m {module}" in result.stdout


def see_this_environment(venv: Path) -> None:
    """Lets ``venv`` import what this interpreter's environment holds, after its own packages.

    ``--system-site-packages`` would give the base interpreter's site-packages: inside a venv
    (a user's, or CI's) that is not where torch, Ray and setuptools are. A ``.pth`` file of plain
    paths works from a system Python and from a venv alike; the ``.pth`` files in those paths
    (this checkout's editable install among them) are not read, so the venv's copy is the one
    imported.
    """
    paths = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    own = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    lines = [path for path in paths if Path(path).is_dir()]
    (Path(own) / "outer-environment.pth").write_text("\n".join(lines) + "\n")


def builds_wheels_here() -> bool:
    """Whether this environment's setuptools builds a wheel by itself (70.1 and later)."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(part) for part in version.split(".")[:2]) >= (70, 1)


@pytest.mark.e2e
def test_relayrl_train_works_from_a_fresh_install(tmp_path):
    """pip installs a copy of the project into a new venv; its relayrl script trains a run."""
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", "build", "*.egg-info", "__pycache__", ".*_cache", "runs"
        ),
    )
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    see_this_environment(venv)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    # setuptools >= 70.1 builds wheels itself; an older one (and no wheel package) needs pip's
    # isolated build, which fetches the pyproject's build requirements.
    isolation = ["--no-build-isolation"] if builds_wheels_here() else []
    install = subprocess.run(
        [*pip, "--quiet", "--no-deps", *isolation, str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    relayrl = venv / "bin" / "relayrl"
    env = cli_env()
    env.pop("PYTHONPATH")  # the installed copy, not this checkout
    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import services; print(services.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    args = ["--set", "seed=1", "--set", "controller.total_frames=2000"]
    args += ["--set", "ray.dashboard=false", "--set", "metrics.enabled=false"]
    args += ["--set", "collector.num_collectors=1", "--set", "replay.num_shards=1"]
    args += ["--set", f"run.dir={work / 'run'}"]
    result = subprocess.run(
        [str(relayrl), "train", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["seed"] == 1 and summary["frames"] >= 2000
    assert summary["run_dir"] == str(work / "run") and summary["checkpoint"]
