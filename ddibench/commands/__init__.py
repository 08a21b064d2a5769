"""The commands of the ``ddibench`` command line, one module per command group (see :mod:`ddibench.cli`)."""
