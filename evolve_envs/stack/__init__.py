"""Assembling the env stack: config schema and loading, the reward model, one env (``factory``),
many (``vector``), the ``gym.make`` ids (``registration``).
"""
