"""ddibench task families (installed as ``ddibench.tasks``).

Each family module exposes ``TASKS``, a mapping from task name to :class:`ddibench.task.Task`, and is
registered under the ``ddibench.tasks`` entry-point group, the same way an outside package adds tasks.
"""
