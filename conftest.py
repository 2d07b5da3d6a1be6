"""Doctest collection over the packages (``--doctest-modules``, see pyproject.toml).

Modules whose import needs RLinf or Ray Serve (tens of seconds on CI's two cores, and no
offline example to run) are not collected; their behaviour is covered by
tests/integrations/rlinf and tests/reward/service/ray_serve.
"""

collect_ignore = [
    "evolve_envs/integrations/rlinf/worker.py",
    "evolve_envs/reward/service/hosting/ray_serve.py",
    # stand-in third-party packages the tests put on sys.path themselves, when they need them:
    # importing them at collection would make them importable for every other test
    "tests/reward/service/backends/vlac_standin",
    "tests/integrations/rlinf/rlinf_embodiment",
]
#: The test folders' conftest files hold fixtures, not examples; collecting them as doctest
#: modules would import them a second time under the same module name.
collect_ignore_glob = ["tests/conftest.py", "tests/*/conftest.py"]
