"""The old path of :mod:`ddibench.toolkit.label_choice`, kept for adapters written against it: its public names, re-exported.

Import from ``ddibench.toolkit.label_choice`` in new code."""

from ddibench.toolkit.label_choice import *  # noqa: F403
