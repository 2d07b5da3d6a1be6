"""What the programs write for people to read: the rollout report (summary, table, per-episode
JSON, plots and videos) and the calibration report (JSON, Markdown, PNGs).

>>> from evolve_envs.cli.reports.rollout import format_table
>>> callable(format_table)
True
"""
