"""`hpctrain report`: a run's figures (PNG) and one-page summary (Markdown), from its run directory alone.

Split by concern: ``series`` reads every metrics line (total, bounded, torch- and matplotlib-free);
``curves``, ``ranks``, ``ps`` and ``trials`` draw the figures; ``plotting`` holds what they share
(matplotlib, imported lazily with the Agg backend); ``summary`` writes report.md; ``build`` ties
them together for one run (`report_run`) or several (`report_trials`: a sweep, an array job).
"""
