"""Algorithm recipes: defaults filled, bad combinations refused naming the field (no Ray)."""

import pytest

from collector.networks.actor_critic import ActorCriticSpec
from collector.networks.q_mlp import ModelSpec
from collector.networks.squashed import SquashedGaussianSpec
from services import train
from services.config import ConfigError, load_config
from services.config.spec import model_spec_for


@pytest.mark.parametrize(
    ("algorithm", "sampler", "loss", "spec_type"),
    [
        ("dqn", "uniform", "dqn", ModelSpec),
        ("ppo", "fifo", "ppo", ActorCriticSpec),
        ("a2c", "fifo", "a2c", ActorCriticSpec),
        ("reinforce", "fifo", "reinforce", ActorCriticSpec),
        ("sac", "uniform", "sac", SquashedGaussianSpec),
    ],
)
def test_the_recipe_fills_what_the_config_leaves_unset(algorithm, sampler, loss, spec_type):
    config = load_config(overrides=[f"algorithm={algorithm}"])
    assert (config.replay.sampler, config.learner.loss) == (sampler, loss)
    assert isinstance(model_spec_for(config), spec_type)
    # A value the user sets wins over the recipe's.
    assert load_config(overrides=[f"algorithm={algorithm}", "learner.lr=0.123"]).learner.lr == 0.123


def test_ppo_on_a_continuous_env_uses_a_gaussian_actor():
    config = load_config(overrides=["algorithm=ppo", "collector.env_id=Pendulum-v1"])
    spec = model_spec_for(config)
    assert (spec.distribution, spec.action_dim) == ("gaussian", 1)


def test_dueling_heads_are_an_option_of_the_q_network():
    spec = model_spec_for(load_config(overrides=["learner.dueling=true"]))
    assert spec.dueling and "4.value.weight" in spec.build().state_dict()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["algorithm=sac", "collector.env_id=CartPole-v1"], "collector.env_id"),
        (["algorithm=dqn", "collector.env_id=Pendulum-v1"], "collector.env_id"),
        (["algorithm=dqn", "replay.sampler=fifo"], "replay.sampler"),
        (["algorithm=sac", "replay.sampler=fifo"], "replay.sampler"),
        (["algorithm=ppo", "replay.sampler=uniform"], "replay.sampler"),
        (
            ["algorithm=ppo", "learner.onpolicy.num_minibatches=3"],
            "learner.onpolicy.num_minibatches",
        ),
        (
            ["algorithm=ppo", "learner.onpolicy.num_minibatches=2048", "learner.world_size=2"],
            "learner.world_size",
        ),
        (["algorithm=a2c", "learner.onpolicy.num_epochs=4"], "learner.onpolicy.num_epochs"),
        (["algorithm=ppo", "controller.init_random_frames=100"], "controller.init_random_frames"),
        (["algorithm=ppo", "learner.loss=dqn"], "learner.loss"),
        (["algorithm=ppo", "replay.capacity=100"], "replay.capacity"),
        (["algorithm=rainbow"], "algorithm"),  # not (yet) an algorithm
        (["algorithm=ppo", "learner.onpolicy.clip_epsilon=0"], "learner.onpolicy.clip_epsilon"),
    ],
)
def test_bad_combinations_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ConfigError) as info:
        model_spec_for(load_config(overrides=overrides))
    assert str(info.value).startswith(f"{field}:"), str(info.value)


def test_the_cli_refuses_sac_on_a_discrete_env_before_any_actor_starts(capsys):
    # The CLI's main in this process: a unit test, failed by its guard if Ray starts.
    assert train.main(["--set", "algorithm=sac", "--set", "collector.env_id=CartPole-v1"]) == 2
    err = capsys.readouterr().err
    assert "collector.env_id: sac needs a continuous (Box) action space" in err
    assert "Started a local Ray" not in err
