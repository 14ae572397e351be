"""The checked-in gRPC modules are what the documented command generates from the proto."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import PYTHON, ROOT

PROTO = "services/proto/relayrl/v1/relayrl.proto"
GENERATED = ("relayrl_pb2.py", "relayrl_pb2_grpc.py")


def documented_command() -> list[str]:
    """The regeneration command as written in the proto's header comment."""
    header = (ROOT / PROTO).read_text().split("syntax")[0]
    text = " ".join(line.lstrip("/ ").rstrip("\\ ") for line in header.splitlines())
    match = re.search(r"python -m grpc_tools\.protoc (.+?\.proto)", text)
    assert match, "the proto's header documents no regeneration command"
    return match.group(1).split()


def test_regeneration_produces_no_difference(tmp_path):
    args = documented_command()
    assert args[-1] == PROTO and "--python_out=." in args and "--grpc_python_out=." in args
    args = [a.replace("_out=.", f"_out={tmp_path}") for a in args]
    result = subprocess.run(
        [PYTHON, "-m", "grpc_tools.protoc", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for name in GENERATED:
        fresh = (tmp_path / PROTO).parent / name
        checked_in = (ROOT / PROTO).parent / name
        assert fresh.read_bytes() == checked_in.read_bytes(), f"{name} differs: regenerate it"


def test_readme_documents_the_same_command():
    readme = (ROOT / "README.md").read_text()
    assert "python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=." in readme
    assert PROTO in readme
