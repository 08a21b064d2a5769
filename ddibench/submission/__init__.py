"""Submission bundles: what a method author sends, and how ddibench checks it.

``ddibench submit RUN_DIR`` packs a finished run into one ``.tar.gz``: the per-sample predictions, the
run's identity and self-reported results, its sessions and LLM-judge scores, and ``bundle.json`` with
the sha256 of every member. ``ddibench verify BUNDLE`` treats the bundle as data, never code: members
are streamed from the archive by a bounded reader of its own (:mod:`ddibench.submission.archive`: regular files
with expected names only, every size capped; predictions are parsed line by line and only what the
checks need is kept), parsed into their record types, and checked —

* every member's hash against ``bundle.json``;
* the run id is the hash of ``run.json``'s identity, and ``bundle.json``, ``run.json`` and
  ``results.json`` name the same task, system, configuration, models and samples;
* the system's configuration hash is the hash of its name, version and configuration; a system
  registered here must be the registered version with a valid configuration and the same LLM roles;
* every LLM call in the traces was made for a role the run declares and answered by the model its
  manifest names (each call records the digest of the model identity); the per-role call, token and
  cost totals in ``results.json`` equal the sums over the traces;
* every label id in the predictions lies in the task's label space;
* the task exists here with the same version and the same data sha256;
* the run evaluated the task's evaluation split, without ``--limit``, with every sample exactly once;
* as many seeds as the task asks for;
* the metrics, recomputed from the predictions against the task's own gold labels, equal the
  self-reported ones.

A passing bundle earns the trust tier ``recomputed`` (``self-reported`` is what it claimed).
``--reproduce`` re-runs the registered system with the bundle's configuration, with empty LLM-answer
and artifact caches (a replay of the submitter's caches would prove nothing), and compares the
predictions sample by sample: every difference is listed, the metrics shown are those of the
reproduced predictions, and the tier rises to ``reproduced`` only when the share of differing samples
is within ``--tolerance`` (default 0: identical), which is recorded with the verdict.

The package, one module per job:

* :mod:`ddibench.submission.pack` — :func:`submit`: a finished run into a bundle (``--compact`` too)
* :mod:`ddibench.submission.stream` — :func:`read_bundle` and the bounded, streaming reader ``verify`` uses
* :mod:`ddibench.submission.verdict` — :class:`Verdict`: the checks, their reasons and the tier
* :mod:`ddibench.submission.verification` — :func:`verify`, :func:`verify_all` and
  :func:`load_finished_or_bundle` (a side of ``report --against``)
* :mod:`ddibench.submission.checks` — the system, model, cost and label checks; adapter provenance
* :mod:`ddibench.submission.reproduction` — :func:`reproduce` and :func:`same_answer`
* :mod:`ddibench.submission.archive` — the bounded reader of a bundle's tar members (no ``tarfile``)
* :mod:`ddibench.submission.sandbox` — :func:`verify_isolated`: ``verify`` in a child process under CPU and memory limits
"""

from __future__ import annotations

from ddibench.submission.checks import describe_provenance, install_hint
from ddibench.submission.pack import WHOLE_TRACES, submit
from ddibench.submission.pack import _sha as _sha  # the tests hash members as submit does
from ddibench.submission.recorded import recorded_verdict
from ddibench.submission.reproduction import SCORE_TOLERANCE, reproduce, same_answer
from ddibench.submission.stream import CALL_FIELDS, CHUNK, MAX_JSON_DEPTH, MAX_LINE, read_bundle
from ddibench.submission.verdict import TIERS, Verdict
from ddibench.submission.verification import load_finished_or_bundle, verify, verify_all

__all__ = [
    "recorded_verdict",
    "CALL_FIELDS",
    "CHUNK",
    "MAX_JSON_DEPTH",
    "MAX_LINE",
    "SCORE_TOLERANCE",
    "TIERS",
    "WHOLE_TRACES",
    "Verdict",
    "describe_provenance",
    "install_hint",
    "load_finished_or_bundle",
    "read_bundle",
    "reproduce",
    "same_answer",
    "submit",
    "verify",
    "verify_all",
]
