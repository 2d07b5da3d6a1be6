"""The math every algorithm shares, with no Ray in it: trajectories, action validators, the loss
result, the entropy floor, the non-finite guard, NumPy/torch conversion."""
