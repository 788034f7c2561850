"""What the invariant checker finds: each broken promise (:class:`Violation`) and the
:class:`Report` of a whole check, as text for a terminal or plain values for JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Violation:
    """One broken promise: which check, about what (a Run ID or deployment@due), details."""

    check: str
    subject: str
    detail: str

    def line(self) -> str:
        return f"{self.check}: {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Report:
    """The violations found, sorted, and what was looked at."""

    violations: tuple[Violation, ...]
    runs: int
    schedules: int
    events: int

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_check(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for violation in self.violations:
            counts[violation.check] = counts.get(violation.check, 0) + 1
        return counts

    def text(self) -> str:
        """A human-readable report: a summary line, then one line per violation."""
        head = (f"checked {self.runs} runs, {self.schedules} schedules, {self.events} events: "
                f"{len(self.violations)} violations")
        return "\n".join([head, *(f"  {v.line()}" for v in self.violations)])

    def adding(self, violations: Iterable[Violation]) -> Report:
        """This report with ``violations`` found elsewhere (the same store) added."""
        more = tuple(violations)
        if not more:
            return self
        return dataclasses.replace(self, violations=tuple(sorted({*self.violations, *more})))

    def without(self, known: Callable[[Violation], bool]) -> Report:
        """This report less the violations ``known`` says were looked at already."""
        return dataclasses.replace(
            self, violations=tuple(v for v in self.violations if not known(v)))

    def to_builtins(self) -> dict[str, object]:
        return {"runs": self.runs, "schedules": self.schedules, "events": self.events,
                "violations": [dataclasses.asdict(v) for v in self.violations]}
