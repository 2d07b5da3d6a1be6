"""Reward models behind one protocol: the wire format, the clients and the reference service.

* :mod:`evolve_envs.reward.protocol` — wire models, the restricted pickle codec, progress math;
  a leaf (standard library, NumPy and pydantic only).
* :mod:`evolve_envs.reward.clients` — HTTP clients, endpoint pool, failure policy. *
:mod:`evolve_envs.reward.service` — the FastAPI server, its backends, Ray Serve, the launcher.

Importing this package imports none of them: the clients never load the server's dependencies."""
