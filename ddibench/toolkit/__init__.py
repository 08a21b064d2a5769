"""The building blocks a system is made of, for the reference systems and an outside author's alike.

* :mod:`ddibench.toolkit.label_choice` — label-choosing LLM systems (one interaction type, or the k most likely
  labels of a label set): prompts, constrained answers, parsers, :class:`LabelChoiceSystem`
* :mod:`ddibench.toolkit.likelihood` — choosing an option by the model's likelihood (``answer_mode=likelihood``)
* :mod:`ddibench.toolkit.parsing` — an LLM's free-text answer into one of a numbered list of options
* :mod:`ddibench.toolkit.answering` — free-text systems (:class:`AnswerSystem`: QA, and DrugBank by label recovery)
* :mod:`ddibench.toolkit.molecule_answers` — the question, constrained answer and parser of a task about one molecule
* :mod:`ddibench.toolkit.label_sets` — what trained systems share on label-set tasks (TWOSIDES)
* :mod:`ddibench.toolkit.corpus` — the text corpora question-answering systems retrieve from, and their indexes

Each module keeps its layer (``tests/test_layers.py``): ``parsing`` sits with the sources, ``corpus`` with the
tools, the rest with the system contract. ``ddibench.label_choice``, ``ddibench.answering``,
``ddibench.molecule_answers`` and ``ddibench.corpus`` are the old paths, kept for adapters written against them.
"""
