"""RLinf: the reward model inside RLinf's LIBERO env worker (see ``docs/rlinf.md``).

``adapter`` wraps RLinf's env, ``worker`` installs it (``launch`` registers the worker),
``late_rewards`` settles ``calls: deferred`` into RLinf's rollout, ``env_check`` checks the hook
points, ``layout`` knows RLinf 0.3's and ``main``'s configs, ``frames`` turns frames upright.
"""
