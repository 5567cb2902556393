"""node-agent: read-only NVML and host health probes for the triage bot (stdlib + nvidia-ml-py).

`__version__` below is the one version of gpu-triage: pyproject.toml reads it (dynamic version),
the bot re-exports it (bot.__version__) and both commands print it (`triage --version`,
`node-agent --version`). It lives here because the agent depends on nothing else of the project.
"""

__version__ = "0.1.0"
