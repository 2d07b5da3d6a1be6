"""Doctest collection over the packages (``--doctest-modules``, see pyproject.toml).

Modules whose import needs RLinf or Ray Serve (tens of seconds on CI's two cores, and no
offline example to run) are not collected; their behaviour is covered by tests/rlinf and
tests/serving.
"""

collect_ignore = [
    "evolve_envs/integrations/rlinf_worker.py",
    "reward_service/ray_serve.py",
]
