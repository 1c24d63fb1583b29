"""Tables and figures, built from result files (run directories) only.

* :mod:`.table`: the files of an experiment grid's comparison (Markdown, CSV, figures); the command
  ``attendout table`` is :mod:`attendout.cli.table`.
* :mod:`.comparison`: the table's statistics as data, read from a results root.
* :mod:`.render`: the table as Markdown and CSV.
* :mod:`.stats`: paired t-test, Holm, bootstrap over examples, detectable difference.
* :mod:`.figures`: the bar chart with error bars and per-task convergence curves of a grid.
* :mod:`.curves`: convergence curves of any runs (validation metric against step).
* :mod:`.inspect`: AD-DROP's view of one example.
* :mod:`.results`: one run's results.json in words (what ``attendout finetune`` prints).

The modules are imported on use (``from attendout.report.comparison import build_table``), so that
``import attendout.report`` stays light.
"""
