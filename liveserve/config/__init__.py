"""Configuration: YAML documents read, checked and built into the frozen dataclasses of the packages below."""
