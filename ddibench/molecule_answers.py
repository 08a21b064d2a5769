"""The old path of :mod:`ddibench.toolkit.molecule_answers`, kept for adapters written against it: its public names, re-exported.

Import from ``ddibench.toolkit.molecule_answers`` in new code."""

from ddibench.toolkit.molecule_answers import *  # noqa: F403
