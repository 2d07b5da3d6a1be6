"""evolve-envs: LIBERO as Gymnasium environments with reward-model shaping."""
