"""The base environments ``gym.make`` builds, before any reward wrapper.

* :mod:`evolve_envs.envs.libero` — LIBERO's suites as Gymnasium envs (MuJoCo, headless);
* :mod:`evolve_envs.envs.synthetic` — ReachPlace, a synthetic pick-and-place task with a true
  progress, for runs and tests that need no simulator;
* :mod:`evolve_envs.envs.headless` — the offscreen GL backend choice (EGL, OSMesa);
* :mod:`evolve_envs.envs.registration` — the registered ids (tables only; their entry point is
  :func:`evolve_envs.stack.factory.make_registered`, registered by
  :mod:`evolve_envs.stack.registration`).

Nothing here imports a reward model or a wrapper.
"""
