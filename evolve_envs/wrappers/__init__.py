"""Gymnasium wrappers that turn reward-model judgements into rewards and termination.

Import explicitly, e.g. ``from evolve_envs.wrappers.progress_reward import ProgressReward``.
"""
