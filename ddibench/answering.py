"""The old path of :mod:`ddibench.toolkit.answering`, kept for adapters written against it: its public names, re-exported.

Import from ``ddibench.toolkit.answering`` in new code."""

from ddibench.toolkit.answering import *  # noqa: F403
