"""Secrets stay off command lines and out of reprs: ``--token-file``, references, repr."""

from __future__ import annotations

import pytest

from services import external_actor, scale
from services.config.grpc import GrpcConfig
from services.config.sections import RunConfig
from services.grpc.tokens import token_from_args


@pytest.mark.parametrize("command", [external_actor.build_parser, scale.build_parser])
def test_commands_read_the_token_from_a_file_a_variable_or_the_environment(
    command, tmp_path, monkeypatch
):
    secret = tmp_path / "token"
    secret.write_text("from-a-file\n")
    parse = command().parse_args
    base = ["--address", "127.0.0.1:1"]
    assert token_from_args(parse([*base, "--token-file", str(secret)])) == "from-a-file"
    monkeypatch.setenv("MY_TOKEN", "from-a-variable")
    assert token_from_args(parse([*base, "--token", "env:MY_TOKEN"])) == "from-a-variable"
    assert token_from_args(parse([*base, "--token", f"file:{secret}"])) == "from-a-file"
    monkeypatch.setenv("RELAYRL_TOKEN", "from-the-environment")
    assert token_from_args(parse(base)) == "from-the-environment"
    with pytest.raises(ValueError, match="--token-file: cannot read"):
        token_from_args(parse([*base, "--token-file", str(tmp_path / "missing")]))


def test_no_secret_in_a_config_repr():
    grpc = GrpcConfig(port=0, token="operator-secret", actor_token="actor-secret")
    for text in (repr(grpc), repr(RunConfig(grpc=grpc)), str(RunConfig(grpc=grpc))):
        assert "operator-secret" not in text and "actor-secret" not in text
