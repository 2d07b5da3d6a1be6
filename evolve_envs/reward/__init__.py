"""Reward models behind one protocol: the wire format, the clients and the reference service.

* :mod:`evolve_envs.reward.protocol` — wire models, the restricted pickle codec, progress math;
  a leaf (standard library, NumPy and pydantic only).
* :mod:`evolve_envs.reward.clients` — HTTP clients, endpoint pool, failure policy.
* :mod:`evolve_envs.reward.service` — the FastAPI server, its backends, Ray Serve, the launcher.
* :mod:`evolve_envs.reward.models` — the progress models shipped with the package.
* :mod:`evolve_envs.reward.fitting` — ``fit-reward``: fitting a progress model on recordings
  (above :mod:`evolve_envs.recording`, which it reads).

Importing this package imports none of them: the clients never load the server's dependencies."""
