"""RLinf: the reward model inside RLinf's LIBERO env worker (see ``docs/rlinf.md``).

``adapter`` wraps RLinf's env, ``worker`` installs it, ``launch`` registers the worker,
``late_rewards`` settles ``calls: deferred`` into RLinf's stored rollout.
"""
