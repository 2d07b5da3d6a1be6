"""DistRL: asynchronous actor-learner training with prioritized replay, Retrace(λ) and the A-RIDE
loss (docs/DISTRL.md)."""
