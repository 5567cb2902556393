"""Job sources: turn a scheduler job id into its logs, nodes and verdict (Slurm today)."""

from .base import (
    InvalidJobId,
    JobInfo,
    JobLog,
    JobSource,
    JobSourceError,
    LogHints,
    NodeControl,
    NoJobSource,
    node_control,
)

__all__ = ["InvalidJobId", "JobInfo", "JobLog", "JobSource", "JobSourceError", "LogHints", "NoJobSource", "NodeControl",
           "node_control"]
