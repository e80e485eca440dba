"""PySpark analysis of simulation traces: verdicts re-derived from histories, and statistics.

The pieces, in the order a trace flows through them:

- ``load``: the one Spark session factory, and readers of a trace directory (Spark or pandas).
- ``history``: pairs each invoke with its completion into operations.
- ``linearizability`` and ``models``: a WGL search over one key's operations against a model.
- ``checks``: what each scenario is checked for (per-key models, node-event checks), applied
  by Spark as grouped maps.
- ``stats``: fault windows, latency, availability, elections, verdicts by fault mix.
- ``job``: the whole ``kraft-analyze`` job; ``report``: its Markdown, PNG and JSON output.

Everything a Spark task runs is a plain function over pandas frames, so a notebook or a
single-process baseline calls the very same code on one run.
"""
