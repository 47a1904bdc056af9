"""The shipped YAML configs, installed as the package `liveserve.configs` (read by `liveserve.config.loader`)."""
