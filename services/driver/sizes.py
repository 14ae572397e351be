"""The three sizes of a run and the config that has them (pure; resized live by ``elastic``).

Examples:
    >>> from services.config import load_config
    >>> config = sized_config(load_config(), Sizes(collectors=3, shards=2, world_size=1))
    >>> config.collector.num_collectors, config.replay.num_shards
    (3, 2)
"""

from __future__ import annotations

import dataclasses

from services.config import ConfigError, RunConfig


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The three sizes of a run.

    Attributes:
        collectors: Collector actors collecting (admitted and not leaving).
        shards: Replay shard actors.
        world_size: Learner ranks.
    """

    collectors: int
    shards: int
    world_size: int

    def to_dict(self) -> dict[str, int]:
        """``{"collectors", "shards", "world_size"}``."""
        return dataclasses.asdict(self)


def sized_config(config: RunConfig, sizes: Sizes) -> RunConfig:
    """``config`` with ``sizes`` (validated again, as the loader validates a file).

    Raises:
        ConfigError: Naming the field the sizes make invalid (e.g. ``learner.global_batch_size``
            not divisible by the new world size).
    """

    def section(name: str, value, **changes):
        try:
            return dataclasses.replace(value, **changes)
        except ValueError as err:
            raise ConfigError(f"{name}.{err}") from None

    collector = section("collector", config.collector, num_collectors=sizes.collectors)
    replay = section("replay", config.replay, num_shards=sizes.shards)
    learner = section("learner", config.learner, world_size=sizes.world_size)
    try:
        return dataclasses.replace(config, collector=collector, replay=replay, learner=learner)
    except ValueError as err:
        raise ConfigError(str(err)) from None
