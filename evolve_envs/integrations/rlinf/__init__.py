"""evolve_envs/integrations/rlinf."""
