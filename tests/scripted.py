"""Scripted time for probe tests: the profiler's clock and timers read it, tests advance it."""

from __future__ import annotations


class Clock:
    """Scripted time in seconds; tests advance it between probe calls."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def ms(self, d: float) -> None:
        self.t += d / 1000.0
