"""Running a system on a task: plan, execute with a resumable journal, score, and report.

* :mod:`ddibench.runner.plan` — :class:`RunRequest` -> :class:`RunPlan` (nothing written yet)
* :mod:`ddibench.runner.rundir` — the run directory: lock, claim, atomic writes, sessions
* :mod:`ddibench.runner.execute` — :func:`execute`: predict, journal, resume
* :mod:`ddibench.runner.scoring` — metrics and cost; :func:`rescore`
* :mod:`ddibench.runner.manifest` — the results record and its manifest (code, packages, system card)
* :mod:`ddibench.runner.records` — the typed, versioned records of a run
* :mod:`ddibench.runner.report` — what ``run`` and ``report`` print
"""
