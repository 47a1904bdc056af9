"""The pipeline fixture of the orchestrator tests, for the reliability tests too."""

from tests.orchestrator.conftest import pipeline  # noqa: F401
