"""The old path of :mod:`ddibench.toolkit.corpus`, kept for adapters written against it: its public names, re-exported.

Import from ``ddibench.toolkit.corpus`` in new code."""

from ddibench.toolkit.corpus import *  # noqa: F403
