"""The reward logic, without Gymnasium: from reward-model answers to rewards and ``done``."""
