import json
import logging

import pytest

from replay.persist.npyio import CheckpointError, read_json
from services.checkpoints.store import CheckpointStore, latest_valid, verify


def save(store, frames, payload=b"x" * 100):
    staging = store.stage(frames)
    (staging / "replay-0").mkdir()
    (staging / "replay-0" / "obs.npy").write_bytes(payload)
    (staging / "driver.json").write_text(json.dumps({"frames": frames}))
    return store.commit(staging, config_digest="abc", counters={"frames": frames})


def test_commit_writes_manifest_and_rotates(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    paths = [save(store, f) for f in (100, 200, 300)]
    assert [p.name for p in store.checkpoints()] == [paths[1].name, paths[2].name]
    manifest = verify(paths[2])
    assert manifest["counters"] == {"frames": 300}
    assert set(manifest["files"]) == {"replay-0/obs.npy", "driver.json"}
    assert not list(tmp_path.glob(".staging-*"))


def test_truncated_file_is_refused_naming_it(tmp_path):
    store = CheckpointStore(tmp_path)
    path = save(store, 100)
    target = path / "replay-0" / "obs.npy"
    target.write_bytes(target.read_bytes()[:50])
    with pytest.raises(CheckpointError, match="obs.npy: size 50"):
        verify(path)


def test_edited_manifest_and_flipped_bytes_are_refused(tmp_path):
    store = CheckpointStore(tmp_path)
    path = save(store, 100)
    target = path / "replay-0" / "obs.npy"
    target.write_bytes(b"y" * 100)  # same size, other content
    with pytest.raises(CheckpointError, match="obs.npy: checksum"):
        verify(path)
    other = save(store, 200)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["files"]["driver.json"]["size"] += 1
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="driver.json: size"):
        verify(other)
    (other / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="manifest.json: unreadable"):
        verify(other)


def test_rotation_directory_falls_back_to_previous_valid(tmp_path, caplog):
    store = CheckpointStore(tmp_path, keep=3)
    good = save(store, 100)
    bad = save(store, 200)
    (bad / "driver.json").write_text("{}")
    with caplog.at_level(logging.WARNING):
        path, manifest = latest_valid(tmp_path)
    assert path == good and manifest["counters"]["frames"] == 100
    assert any("driver.json" in r.message for r in caplog.records)
    with pytest.raises(CheckpointError):
        latest_valid(bad)


def test_rotation_touches_only_its_own_runs_checkpoints(tmp_path):
    mine, other = (
        CheckpointStore(tmp_path, keep=1, owner="run-a"),
        CheckpointStore(tmp_path, keep=1, owner="run-b"),
    )
    theirs = [save(other, 100), save(other, 200)]  # keep=1: run-b's own rotation drops one
    assert not theirs[0].exists() and theirs[1].exists()
    busy = other.stage(300)  # run-b is writing a checkpoint right now
    old, new = save(mine, 400), save(mine, 500)
    assert not old.exists() and new.exists()
    assert theirs[1].exists() and busy.exists()  # run-a's rotation left run-b's alone
    assert verify(theirs[1])["run_id"] == "run-b" and verify(new)["run_id"] == "run-a"
    resumed = CheckpointStore(tmp_path, keep=1, owner="run-c")
    resumed.owners.add("run-a")  # a run resumed from run-a rotates run-a's checkpoints too
    latest = save(resumed, 600)
    assert latest.exists() and not new.exists() and theirs[1].exists()


def test_staging_leftover_is_ignored_and_empty_dir_refused(tmp_path):
    store = CheckpointStore(tmp_path)
    staging = store.stage(100)
    (staging / "driver.json").write_text("{}")  # a crash before commit
    with pytest.raises(CheckpointError, match="no valid checkpoint"):
        latest_valid(tmp_path)
    path = save(store, 100)
    assert latest_valid(tmp_path)[0] == path


def test_replay_files_and_checkpoint_directories_raise_the_one_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="missing.json: cannot read") as replay_file:
        read_json(tmp_path / "missing.json")  # a replay shard's file
    with pytest.raises(CheckpointError, match="manifest.json: missing") as directory:
        verify(tmp_path)  # the driver's checkpoint directory
    for err in (replay_file.value, directory.value):  # what each one raised before still holds
        assert isinstance(err, ValueError) and isinstance(err, RuntimeError)
