"""The storage root and the rule keeping run data out of a submitted job's working directory."""

import json
from pathlib import Path

import pytest

from services.config import ConfigError, load_config
from services.run.rundir import resolve_run_dir
from services.run.storage import DEFAULT_STORAGE, STORAGE_ENV, check_run_paths, storage_root


def test_the_root_is_the_config_then_the_environment_then_the_home_default(monkeypatch):
    monkeypatch.setenv(STORAGE_ENV, "/srv/results")
    assert storage_root("/data/x") == Path("/data/x")
    assert storage_root(None) == Path("/srv/results")
    monkeypatch.delenv(STORAGE_ENV)
    assert storage_root(None) == Path(DEFAULT_STORAGE).expanduser()
    assert storage_root(None).is_absolute() and str(storage_root(None)).startswith(str(Path.home()))


def test_a_run_directory_is_absolute_under_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv(STORAGE_ENV, str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    run_id, run_dir = resolve_run_dir("r", None, load_config().run.storage)
    assert run_dir == tmp_path / "results" / run_id and run_dir.is_dir()
    _, relative = resolve_run_dir("r", None, "rel")  # relative: against the working directory
    assert relative.is_absolute() and relative.parent == tmp_path / "rel"


def _as_submitted_job(monkeypatch, workdir: Path) -> None:
    """This process's environment as Ray's job supervisor sets it for a --working-dir job."""
    job = {"runtime_env": {"working_dir": "gcs://_ray_pkg_0123.zip"}, "metadata": {}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    monkeypatch.chdir(workdir)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("run.storage=results", "run.storage"),
        ("run.dir=out/run", "run.dir"),
        ("checkpoint.dir=ckpts", "checkpoint.dir"),
    ],
)
def test_a_job_refuses_paths_in_its_working_directory(tmp_path, monkeypatch, override, field):
    _as_submitted_job(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match=rf"^{field}: .* inside the job's working directory"):
        check_run_paths(load_config(overrides=[override]))


def test_a_job_accepts_the_default_root_and_absolute_paths_elsewhere(tmp_path, monkeypatch):
    workdir = tmp_path / "working_dir_files" / "pkg"
    workdir.mkdir(parents=True)
    _as_submitted_job(monkeypatch, workdir)
    monkeypatch.setenv(STORAGE_ENV, str(tmp_path / "results"))
    check_run_paths(load_config())
    check_run_paths(load_config(overrides=[f"run.dir={tmp_path / 'elsewhere'}"]))
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR")  # outside a job, relative is fine
    check_run_paths(load_config(overrides=["run.storage=results"]))
