"""The run configuration: sections, the YAML loader, algorithm recipes and their checks."""

from services.config.run import ConfigError, RunConfig, load_config, parse_override

__all__ = ["ConfigError", "RunConfig", "load_config", "parse_override"]
