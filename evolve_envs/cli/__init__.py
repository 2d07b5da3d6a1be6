"""The command-line programs: ``evolve-envs rollout|calibrate|train|tasks`` and their errors.

The only package that may import every other one. :mod:`evolve_envs.cli.main` holds the argument
parser; each command's job sits in its own module; :mod:`evolve_envs.cli.errors` turns expected
failures into one line and an exit status.
"""
