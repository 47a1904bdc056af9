"""The packages of the one distribution: the six at the top level (the lab among them), and `configs/` installed as the
package data `liveserve.configs` (so an installed LiveServe finds its configs by importlib.resources)."""

from setuptools import find_packages, setup

PACKAGES = find_packages(include=["lab*", "liveserve*", "orchestrator*", "stages*", "monitor*", "kvtier*"])

setup(packages=[*PACKAGES, "liveserve.configs"], package_dir={"liveserve.configs": "configs"})
