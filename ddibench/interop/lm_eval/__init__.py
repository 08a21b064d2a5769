"""lm-evaluation-harness: run ddibench tasks in lm-eval, and bring lm-eval's answers back as ddibench runs.

``ddibench export lm-eval DIR --task drugbank_s2`` writes, for each task:

* ``DIR/ddibench_<task>.yaml`` — an lm-eval task (``generate_until``) over the task's evaluation split;
* ``DIR/ddibench_data/<task>.jsonl`` — its documents (sample id, inputs, gold, and the task's version
  and data sha256, so an answer can always be traced to the exact data);
* ``DIR/ddibench_utils.py`` — a few lines of glue that call this package: the documents (lm-eval's
  ``custom_dataset``, read from ``ddibench_data/`` beside the glue), the prompt (``doc_to_text``), the
  parser and per-sample scores (``process_results``) and the aggregations are ddibench's own.

The folder holds no absolute path (lm-eval resolves ``dataset_kwargs.data_files`` from its current
directory, so the documents are found from the glue's own place instead): it can be moved or shared,
and lm-eval (0.4.9 or newer, for ``custom_dataset``) runs it from any directory.

Prompts: a classification task (DrugBank) gets the prompt of ddibench's ``zero-shot`` system (its system
text and question in one user turn: lm-eval's chat path has no per-task system message) and, with
``--json-mode``, the same constrained-JSON request ddibench would send; a free-text task (DDI QA,
MedQuAD) gets the question after the answering instruction of ``no-rag``. Answers are parsed with
ddibench's parser and scored with ddibench's metrics (macro-F1, kappa; embedding similarity and
BERTScore), so lm-eval prints the numbers ddibench would.

``ddibench import lm-eval SAMPLES.jsonl`` reads lm-eval's ``--log_samples`` output of such a task (and the
``results_*.json`` beside it) and writes a ddibench run directory: identity, journal (one prediction
per document, with lm-eval's raw response in the trace), session and results with a manifest that
names lm-eval's version, model and model arguments (keys redacted). The run can then be verified,
recomputed and put on the board like any other. Token counts are not in lm-eval's samples, so the
imported run's cost is marked as not recorded.

The package, one module per job:

* :mod:`ddibench.interop.lm_eval.export` — :func:`export`: tasks into lm-eval configs and documents
* :mod:`ddibench.interop.lm_eval.glue` — what lm-eval calls (documents, prompt, parser, scores, aggregations);
  re-exported here, at the path every exported ``ddibench_utils.py`` imports it from
* :mod:`ddibench.interop.lm_eval.importing` — :func:`import_samples`: lm-eval's logged samples into a ddibench run
"""

from __future__ import annotations

from ddibench.interop.lm_eval.export import EXPORT_VERSION, JSON_MODES, export, kind_of
from ddibench.interop.lm_eval.glue import (
    agg_accuracy,
    agg_kappa,
    agg_macro_f1,
    agg_mean,
    doc_to_target,
    doc_to_text,
    load_documents,
    parse_answer,
    process_results,
)
from ddibench.interop.lm_eval.importing import import_samples

__all__ = [
    "EXPORT_VERSION",
    "JSON_MODES",
    "agg_accuracy",
    "agg_kappa",
    "agg_macro_f1",
    "agg_mean",
    "doc_to_target",
    "doc_to_text",
    "export",
    "import_samples",
    "kind_of",
    "load_documents",
    "parse_answer",
    "process_results",
]
