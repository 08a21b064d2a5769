"""Verified results, the board's side of ddibench (the layer between the submission checks and the board).

* :mod:`ddibench.results.store` — the results store (DuckDB) the board reads: runs, per-sample detail, floors, ties
* :mod:`ddibench.results.shipped` — the results that ship with ddibench: the bundles under the checkout's
  ``results/`` folder, their index, ``board publish`` and ``board check``, and the store built from them

This package holds code only; the shipped bundles themselves live in ``results/`` at the top of the checkout.
"""
