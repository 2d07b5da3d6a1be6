"""What the programs write for people to read: the rollout report (summary, table, per-episode
JSON, plots and videos) and the calibration report (JSON, Markdown, PNGs)."""
