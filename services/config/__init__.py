"""The run configuration: sections, the YAML loader, algorithm recipes and their checks.

Modules:
    * ``sections``: :class:`ConfigError` and the frozen sections composed into :class:`RunConfig`
      (``run``, ``controller``, ``checkpoint``, ``metrics``, ``ray``); the ``grpc`` section is
      ``grpc``, the ``evaluation`` section ``evaluation``, the component sections live with their
      packages (``collector.config``, ``replay.config``, ``learner.config``).
    * ``loader``: :func:`load_config` (YAML file + ``--set`` overrides), :func:`config_from_dict`
      (a nested mapping + dotted-key overrides) and :func:`parse_override`.
    * ``recipes``: the :class:`~services.config.recipes.Algorithm` dataclass and the
      ``ALGORITHMS`` registry: an algorithm as data (loop, loss, network, defaults).
    * ``checks``: refusals of what an algorithm cannot run (config and env spaces), no torch.
    * ``determinism``: what ``run.deterministic`` refuses (arrival- or clock-driven fields).
    * ``multiagent``: the IQL, VDN and QMIX recipes' defaults, refusals and env spaces.
    * ``spec``: the env's spaces and the network spec a run calls for
      (``collector.networks.builders`` filled from the config).

Validating a config imports no torch. Modules inside this package import each other's modules
(``services.config.sections``), never this package, to keep it free of cycles.
"""

from services.config.loader import config_from_dict, load_config, parse_override
from services.config.sections import ConfigError, RunConfig

__all__ = ["ConfigError", "RunConfig", "config_from_dict", "load_config", "parse_override"]
