"""Only what pyproject.toml cannot say: the signature library's import name.

The folder signatures/ is installed as the package `gpu_triage_signatures`: a top-level `signatures`
would clash with the PyPI distribution of that name. A pyproject `packages.find` cannot rename a
folder, and a fixed `packages` list would silently drop every new bot/ subpackage, so the packages
are found here and the one mapping added. Everything else lives in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

SIGNATURES = "gpu_triage_signatures"  # bot/engine/library.py default_root() imports this name

setup(
    # namespace packages too: bot/slack has no __init__.py (pyproject's packages.find found it the same way)
    packages=[*find_namespace_packages(include=["bot", "bot.*", "node_agent", "node_agent.*"],
                                       exclude=["*.__pycache__"]), SIGNATURES],
    package_dir={SIGNATURES: "signatures"},
)
