"""The stack configs shipped with evolve-envs, as package data.

``evolve_envs.stack.loading.load_config`` (and so ``make_env``, ``gym.make(..., config=...)`` and
``evolve-envs rollout --config``) accepts a file path or the name of one of these files:
``libero_10`` for ``evolve_envs/configs/libero_10.yaml``, ``fast_dev`` for
``evolve_envs/configs/presets/fast_dev.yaml``. Names resolve through :mod:`importlib.resources`, so
they work from any directory and from an installed wheel. ``docs/PRESETS.md`` says what each file is
for.

Example:
    >>> from importlib.resources import files
    >>> files("evolve_envs.configs").joinpath("libero_10.yaml").is_file()
    True
"""
