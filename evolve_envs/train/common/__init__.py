"""The math every algorithm shares, with no Ray in it: trajectories, action validators, the loss
result, the entropy floor, the non-finite guard, NumPy/torch conversion.

>>> from evolve_envs.train.common.entropy_floor import next_entropy_coef
>>> next_entropy_coef(0.01, base=0.01, target=None, entropy=0.5, rate=0.05)
0.01
"""
