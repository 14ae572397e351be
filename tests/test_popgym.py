"""POPGym as an extra: its ids reach ``collector.env_id``; a missing extra is refused naming it.

CI installs the ``popgym`` extra (``.ci/run``); the refusal is checked without it. PPO is marked
recurrent for these tests only, until its registration says so.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from collector.envs.vector import make_vector_env
from services.config import ConfigError, load_config
from services.config.recipes import ALGORITHMS
from services.config.spec import env_spaces, model_spec_for
from tests.conftest import ROOT

CONFIG = ROOT / "deploy" / "configs" / "repeatprevious_ppo_gru.yaml"


@pytest.fixture
def recurrent_ppo(monkeypatch):
    monkeypatch.setitem(ALGORITHMS, "ppo", dataclasses.replace(ALGORITHMS["ppo"], recurrent=True))


def test_a_popgym_id_without_the_extra_is_refused_naming_it(monkeypatch, recurrent_ppo):
    monkeypatch.setitem(sys.modules, "popgym", None)  # as if not installed: import fails
    config = load_config(CONFIG)
    with pytest.raises(ConfigError, match=r"collector.env_id.*popgym extra.*relayrl\[popgym\]"):
        env_spaces(config)


def test_the_shipped_config_builds_a_recurrent_policy_that_plays_repeat_previous(recurrent_ppo):
    pytest.importorskip("popgym")
    config = load_config(CONFIG, ["learner.recurrent_hidden_size=8", "learner.hidden_sizes=[8]"])
    spaces = env_spaces(config)
    assert [type(space).__name__ for space in spaces] == ["Discrete", "Discrete"]
    spec = model_spec_for(config, spaces)
    assert spec.family == "recurrent_actor_critic"
    policy = spec.make_policy(spec.build(), np.random.SeedSequence(0))
    envs = make_vector_env(config.collector.env_id, 2)
    try:
        obs, _ = envs.reset(seed=[0, 1])
        state, total = policy.initial_state(2), np.zeros(2)
        for _ in range(51):  # one episode: 52 cards, the first dealt at reset
            actions, _, state = policy.act(obs, {}, state=state)
            obs, rewards, terminated, _, _ = envs.step(actions)
            total += rewards
    finally:
        envs.close()
    assert terminated.all() and (np.abs(total) <= 1 + 1e-9).all()
