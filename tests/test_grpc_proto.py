"""The checked-in gRPC modules are what the documented command generates from each proto."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT

# The experience plane lives below the replay shards; the control plane is the driver's.
PROTOS = ("replay/wire/experience.proto", "services/grpc/control.proto")


def documented_command(proto: str) -> list[str]:
    """The regeneration command as written in the proto's header comment."""
    header = (ROOT / proto).read_text().split("syntax")[0]
    text = " ".join(line.lstrip("/ ").rstrip("\\ ") for line in header.splitlines())
    match = re.search(r"python -m grpc_tools\.protoc (.+?\.proto)", text)
    assert match, f"{proto}'s header documents no regeneration command"
    return match.group(1).split()


@pytest.mark.parametrize("proto", PROTOS)
def test_regeneration_produces_no_difference(tmp_path, proto):
    args = documented_command(proto)
    assert args[-1] == proto and "--python_out=." in args and "--grpc_python_out=." in args
    args = [a.replace("_out=.", f"_out={tmp_path}") for a in args]
    result = subprocess.run(
        [PYTHON, "-m", "grpc_tools.protoc", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    stem = proto.rsplit("/", 1)[1].removesuffix(".proto")
    for name in (f"{stem}_pb2.py", f"{stem}_pb2_grpc.py"):
        fresh = (tmp_path / proto).parent / name
        checked_in = (ROOT / proto).parent / name
        assert fresh.read_bytes() == checked_in.read_bytes(), f"{name} differs: regenerate it"


def test_the_grpc_docs_document_the_same_command():
    text = (ROOT / "docs" / "grpc.md").read_text()
    assert "python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=." in text
    for proto in PROTOS:
        assert proto in text


def test_the_replay_side_loads_no_control_plane():
    """A replay shard's wire contract knows the Experience service only."""
    from replay.wire import experience_pb2

    assert set(experience_pb2.DESCRIPTOR.services_by_name) == {"Experience"}
