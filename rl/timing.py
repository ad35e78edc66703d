"""Wall time by phase of a run: what the trainer prints at the end and keeps in ``summary.json``.

Example::

    >>> times = PhaseTimes()
    >>> times.add("eval before", 12.0)
    >>> times.add("rollouts", 30.5)
    >>> times.add("rollouts", 29.5)
    >>> times.as_dict()
    {'eval before': 12.0, 'rollouts': 60.0}
    >>> print(times.table(total=80.0))
    eval before   0:12  15%
    rollouts      1:00  75%
    other         0:08  10%
    total         1:20
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

__all__ = ["PhaseTimes"]


class PhaseTimes:
    """Seconds spent in each named phase, in the order phases first ran; a phase may run many times."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        self._seconds[phase] = self._seconds.get(phase, 0.0) + max(0.0, float(seconds))

    @contextlib.contextmanager
    def timer(self, phase: str) -> Iterator[None]:
        """Time the block as ``phase`` (also when it raises)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - t0)

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in self._seconds.items()}

    def table(self, total: float | None = None) -> str:
        """One line a phase (m:ss and share of ``total``), then ``other`` (the rest of ``total``) and
        ``total``; without ``total``, the sum of the phases."""
        rows = list(self._seconds.items())
        total = sum(v for _, v in rows) if total is None else total
        rest = total - sum(v for _, v in rows)
        if rest >= 0.5:
            rows.append(("other", rest))
        width = max([len(k) for k, _ in rows] + [len("total")])
        lines = [f"{k:<{width}}  {_clock(v):>5}  {100 * v / total:.0f}%" if total > 0 else f"{k:<{width}}  {_clock(v):>5}"
                 for k, v in rows]
        return "\n".join([*lines, f"{'total':<{width}}  {_clock(total):>5}"])


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}:{s:02d}"
