"""The policy benchmark (``kairos bench policies``), one module per part:

* :mod:`eval.bench.methods` — one spec class per method kind, in the registry :data:`~eval.bench.methods.METHOD_KINDS`
  (a new kind is one :class:`~eval.bench.methods.MethodSpec` subclass and a registration); the builtin kinds in
  :mod:`eval.bench.kinds`, IRCoT and FLARE as published in :mod:`eval.bench.published`;
* :mod:`eval.bench.config` — :class:`~eval.bench.config.BenchConfig`, the slices, loading a YAML;
* :mod:`eval.bench.runner` — the :class:`~eval.bench.runner.Runner` (one resumable JSONL per method and split);
* :mod:`eval.bench.calibration` — threshold grids, the dev sweeps, snapshot selection, the cache oracle, Random's
  seeds;
* :mod:`eval.bench.summary` — statistics and the summary the report renders.

:mod:`eval.bench.policies` runs them (``run_bench``) and is the CLI; it re-exports the names above.
"""
