"""CollectorConfig: the n-step, discount and env fields are validated at the edge."""

import re

import pytest

from collector.config import CollectorConfig
from collector.envs.vector import is_factory_path


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_step": 0}, "n_step: must be >= 1, got 0"),
        ({"gamma": 1.5}, "gamma: must be in [0, 1], got 1.5"),
        ({"env_id": ""}, "env_id: must be a gymnasium id or module:function"),
        ({"vector_mode": "threads"}, "vector_mode: must be one of"),
        ({"nice": -5}, "nice: must be an integer in [0, 19] (raising priority needs privileges)"),
        ({"nice": 20}, "nice: must be an integer in [0, 19]"),
    ],
)
def test_invalid_fields_are_named(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        CollectorConfig(**kwargs)


def test_defaults_and_factory_envs():
    config = CollectorConfig(env_id="my_pkg.envs:make_env", env_kwargs={"size": 3}, n_step=3)
    assert (config.n_step, config.gamma, config.env_kwargs) == (3, 0.99, {"size": 3})
    assert is_factory_path(config.env_id)
    assert not is_factory_path(CollectorConfig().env_id)
    assert not is_factory_path("ALE/Pong-v5")
