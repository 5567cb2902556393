"""The agent's /metrics: Prometheus text exposition format 0.0.4, written by hand.

The agent is standard library + nvidia-ml-py only, so no prometheus_client: counters and histograms
with labels are a few dictionaries under one lock. Series (all prefixed node_agent_):

- probe_duration_seconds{probe} (histogram): each probe's run time, timed-out ones included
- probe_results_total{probe,health}: answers per probe and health
- requests_total{endpoint,status}: HTTP answers (endpoint is a known path or "other")
- nvml_hangs_total{fn}: NVML calls that did not return in time (the worker was killed)
- nvml_quarantines, nvml_stuck_workers (gauges, read at scrape time)
- connections_dropped_total{reason}: slow, evicted or refused connections
- info{version,simulated}: 1
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Tuple

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Labels = Tuple[Tuple[str, str], ...]  # typing.Tuple: evaluated at import, and the agent runs on 3.8


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs)
    return "{" + body + "}" if body else ""


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Registry:
    """Counters, histograms and series read at scrape time; `render()` is the /metrics body."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._help: dict[str, tuple[str, str]] = {}  # name -> (type, help), in registration order
        self._counters: dict[str, dict[Labels, float]] = {}
        self._hists: dict[str, tuple[Sequence[float], dict[Labels, list[float]]]] = {}
        self._read: dict[str, Callable[[], Iterable[tuple[Labels, float]]]] = {}

    def counter(self, name: str, help_text: str) -> None:
        self._help[name] = ("counter", help_text)
        self._counters.setdefault(name, {})

    def histogram(self, name: str, help_text: str, buckets: Sequence[float] = DURATION_BUCKETS) -> None:
        self._help[name] = ("histogram", help_text)
        self._hists.setdefault(name, (tuple(sorted(buckets)), {}))

    def collect(self, name: str, kind: str, help_text: str, read: Callable[[], Iterable[tuple[Labels, float]]]) -> None:
        """A series read when scraped (a gauge, or a counter kept elsewhere): `read()` gives (labels, value)."""
        self._help[name] = (kind, help_text)
        self._read[name] = read

    def inc(self, name: str, labels: Labels = (), by: float = 1.0) -> None:
        with self._lock:
            series = self._counters[name]
            series[labels] = series.get(labels, 0.0) + by

    def observe(self, name: str, value: float, labels: Labels = ()) -> None:
        buckets, series = self._hists[name]
        with self._lock:
            counts = series.get(labels)
            if counts is None:
                counts = series[labels] = [0.0] * (len(buckets) + 2)  # buckets..., count, sum
            for i, le in enumerate(buckets):
                if value <= le:
                    counts[i] += 1
            counts[-2] += 1
            counts[-1] += value

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            counters = {n: dict(s) for n, s in self._counters.items()}
            hists = {n: (b, {k: list(v) for k, v in s.items()}) for n, (b, s) in self._hists.items()}
        for name, (kind, help_text) in self._help.items():
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            if name in self._read:
                try:
                    values = sorted(self._read[name]())
                except Exception:  # a scrape must not fail because one reading did
                    values = []
                for labels, value in values:
                    lines.append(f"{name}{_labels(labels)} {_num(value)}")
            elif kind == "counter":
                for labels, value in sorted(counters[name].items()):
                    lines.append(f"{name}{_labels(labels)} {_num(value)}")
            else:
                buckets, series = hists[name]
                for labels, counts in sorted(series.items()):
                    for le, n in zip(buckets, counts):
                        lines.append(f"{name}_bucket{_labels(labels + (('le', _num(le)),))} {_num(n)}")
                    lines.append(f"{name}_bucket{_labels(labels + (('le', '+Inf'),))} {_num(counts[-2])}")
                    lines.append(f"{name}_count{_labels(labels)} {_num(counts[-2])}")
                    lines.append(f"{name}_sum{_labels(labels)} {_num(counts[-1])}")
        return "\n".join(lines) + "\n"
