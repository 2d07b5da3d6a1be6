"""What runs leave behind: recorded episodes and per-episode metrics.

* :mod:`evolve_envs.recording.episodes` — the recorded-episode format (Parquet per episode and
  an append-only index), its writer and reader;
* :mod:`evolve_envs.recording.metrics_log` — per-episode metrics rows (CSV, TensorBoard, W&B);
* :mod:`evolve_envs.recording.shipped` — the recordings shipped with the package (the
  calibration controls).
"""
