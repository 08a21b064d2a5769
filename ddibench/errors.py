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


LISTED_KINDS = ("task", "system", "profile", "model")  # the kinds 'ddibench list KIND' shows (tests/test_cli.py checks)


class UnknownNameError(DdibenchError):
    """A task, system, profile or dataset name that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str], where: str | None = None) -> None:
        """``where`` says how to see the known names when no close one exists (default: ``ddibench list KINDs``
        for the kinds that command lists, else the known names themselves)."""
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        if close:
            fix = "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
        elif where:
            fix = f"{where} ({len(known)} known)"
        elif kind in LISTED_KINDS:
            fix = f"run 'ddibench list {kind}s' to see them ({len(known)} known)"
        else:
            shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
            fix = f"known {kind}s: {shown}"
        super().__init__(f"unknown {kind} '{name}'", fix)
        self.kind, self.name, self.suggestions = kind, name, close


class DataError(DdibenchError):
    """A source file that is missing, corrupt, or not what its pin says."""


class ModelEndpointError(DdibenchError):
    """A model endpoint that cannot be reached or answers with errors."""

    exit_code = 3


class EndpointGone(ModelEndpointError):
    """An endpoint that is gone for good (the embedded server's process ended): the run stops at once,
    since no retry can reach it."""


class RunDirError(DdibenchError):
    """A run directory that belongs to another run or cannot be used."""


class ConfigError(DdibenchError):
    """An option or configuration value that is not valid."""


class StorageError(DdibenchError):
    """A file or directory that cannot be written or read: a full disk, a read-only place, a file where
    a directory belongs."""


def write_error(exc: OSError, path: object = None, fix: str | None = None) -> StorageError:
    """A one-line error for an operating-system error on ``path`` (or the path the error names)."""
    import errno

    where = path if path is not None else (exc.filename or "a file")
    reason = exc.strerror or str(exc)
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return StorageError(
            f"cannot write {where}: {reason}",
            fix or "free some space (or raise the quota) and re-run the same command; what was finished before is kept",
        )
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StorageError(
            f"cannot write {where}: {reason}",
            fix or "choose a writable place (--runs-dir, --run-dir, --out or $DDIBENCH_CACHE)",
        )
    if code in (errno.ENOTDIR, errno.EEXIST):
        named = exc.filename or where
        return StorageError(
            f"{named} is in the way: a file stands where a directory is needed",
            fix or "remove it or choose another path",
        )
    if code == errno.EISDIR:
        return StorageError(f"{exc.filename or where} is a directory, not a file", fix or "give the path of a file")
    if code == errno.ENOENT:
        return StorageError(
            f"{exc.filename or where} does not exist ({reason})",
            fix or "create its directory first, or choose an existing one",
        )
    return StorageError(f"cannot use {where}: {reason}", fix or "check the path, its permissions and the free space")
