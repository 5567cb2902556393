"""gpu-triage: diagnose failed GPU training jobs from their logs and their hosts."""

from node_agent import __version__  # the one version of the project (see node_agent/__init__.py)

__all__ = ["__version__"]
