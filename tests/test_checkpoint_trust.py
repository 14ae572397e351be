"""Loading trusts no code a checkpoint names: load_policy, evaluate, export and --resume.

Real checkpoint files (a learner core's state, the run's config, a manifest whose SHA-256s the
attacker recomputed), the real commands in process. The hostile config names ``os:system`` with
a command that would create a marker file: the marker must never appear.
"""

from __future__ import annotations

import json

import pytest
import torch

from learner.core import LearnerCore
from services import evaluate, export, train
from services.checkpoints.store import MANIFEST, SIGNATURE, CheckpointStore, write_json
from services.checkpoints.trust import UntrustedCheckpoint
from services.config import load_config
from services.config.spec import env_spaces, model_spec_for
from services.policy import load_policy

USER_NETWORK = "tests.network_examples:residual_q_network"
KEY = b"a checkpoint key"


def write_checkpoint(root, overrides=(), *, key=None, hostile=None):
    """A CartPole DQN checkpoint; ``hostile``: its config.json is replaced with that dict."""
    config = load_config(None, list(overrides))
    core = LearnerCore(model_spec_for(config, env_spaces(config)), config.learner)
    store = CheckpointStore(root, key=key)
    staging = store.stage(frames=1000)
    torch.save(
        {**core.state_dict(), "meta": {"rank": 0, "world_size": 1}}, staging / "learner-0.pt"
    )
    write_json(staging / "config.json", hostile if hostile is not None else config.to_dict())
    return store.commit(staging, config_digest=config.digest(), counters={})


def hostile_config(marker) -> dict:
    config = load_config(None, []).to_dict()
    config["collector"]["env_id"] = "os:system"
    config["collector"]["env_kwargs"] = {"command": f"touch {marker}"}
    return config


@pytest.fixture
def hostile(tmp_path):
    marker = tmp_path / "pwned"
    path = write_checkpoint(tmp_path / "checkpoints", hostile=hostile_config(marker))
    return path, marker


def test_a_checkpoint_naming_os_system_is_refused_everywhere(hostile, tmp_path, capsys):
    path, marker = hostile
    with pytest.raises(UntrustedCheckpoint, match="collector.env_id names the code 'os:system'"):
        load_policy(path)
    assert evaluate.main([str(path), "--episodes", "1"]) == 2
    assert export.main([str(path), "--format", "pt2", "--out", str(tmp_path / "p.pt2")]) == 2
    assert train.main(["--resume", str(path.parent), "--set", "collector.num_collectors=1"]) == 2
    errors = capsys.readouterr().err
    assert errors.count("--allow-module os") == 3, errors  # evaluate, export, resume
    assert not marker.exists()
    # Allowing another module changes nothing.
    with pytest.raises(UntrustedCheckpoint):
        load_policy(path, allow_modules=["mypkg"])
    assert not marker.exists()


def test_code_loads_when_its_module_is_allowed_or_the_checkpoint_is_signed(tmp_path):
    overrides = [f"learner.network={USER_NETWORK}"]
    unsigned = write_checkpoint(tmp_path / "unsigned", overrides)
    with pytest.raises(UntrustedCheckpoint, match="--allow-module tests"):
        load_policy(unsigned)
    assert load_policy(unsigned, allow_modules=["tests"]).version == 0
    signed = write_checkpoint(tmp_path / "signed", overrides, key=KEY)
    assert (signed / SIGNATURE).exists()
    assert load_policy(signed, key=KEY).version == 0  # signed with our key: trusted
    with pytest.raises(UntrustedCheckpoint, match="signature does not match"):
        load_policy(signed, key=b"another key", allow_modules=["tests"])
    # A signed checkpoint without a key to check it with: the code rule holds.
    with pytest.raises(UntrustedCheckpoint, match="--allow-module tests"):
        load_policy(signed)


def test_a_changed_signed_checkpoint_is_refused_even_with_fresh_checksums(tmp_path, capsys):
    signed = write_checkpoint(tmp_path / "signed", key=KEY)
    assert load_policy(signed, key=KEY).version == 0
    # The attacker rewrites the config and recomputes the manifest's SHA-256s (unkeyed).
    marker = tmp_path / "pwned"
    config_file = signed / "config.json"
    config_file.write_text(json.dumps(hostile_config(marker)))
    manifest = json.loads((signed / MANIFEST).read_text())
    from services.checkpoints.store import sha256_file

    manifest["files"]["config.json"] = {
        "size": config_file.stat().st_size,
        "sha256": sha256_file(config_file),
    }
    (signed / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    with pytest.raises(UntrustedCheckpoint, match="signature does not match"):
        load_policy(signed, key=KEY)
    key_file = tmp_path / "key"
    key_file.write_text(KEY.decode() + "\n")
    argv = [str(signed), "--episodes", "1", "--checkpoint-key", f"file:{key_file}"]
    assert evaluate.main(argv) == 2
    assert "signature does not match" in capsys.readouterr().err
    assert not marker.exists()
