"""User-facing errors.

Every error a user can cause (bad input, missing data, unreachable model, mismatched run directory)
is a :class:`DdibenchError`: the CLI prints it as one line naming the problem and the fix, and exits
non-zero. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DdibenchError(Exception):
    """An error the user can fix; ``str()`` is one line: the problem, then how to fix it."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem.rstrip(".")
        self.fix = fix
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.problem}; {self.fix}" if self.fix else self.problem


class UnknownNameError(DdibenchError):
    """A task, system, profile or dataset name that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        if close:
            fix = "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
        else:
            fix = f"run 'ddibench list {kind}s' to see them ({len(known)} known)"
        super().__init__(f"unknown {kind} '{name}'", fix)
        self.kind, self.name, self.suggestions = kind, name, close


class DataError(DdibenchError):
    """A source file that is missing, corrupt, or not what its pin says."""


class ModelEndpointError(DdibenchError):
    """A model endpoint that cannot be reached or answers with errors."""

    exit_code = 3


class RunDirError(DdibenchError):
    """A run directory that belongs to another run or cannot be used."""


class ConfigError(DdibenchError):
    """An option or configuration value that is not valid."""
