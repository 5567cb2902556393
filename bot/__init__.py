"""gpu-triage: diagnose failed GPU training jobs from their logs and their hosts."""

__version__ = "0.1.0"
