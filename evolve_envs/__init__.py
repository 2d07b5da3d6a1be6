"""evolve-envs: LIBERO as Gymnasium environments with reward-model shaping.

Importing the package registers ``evolve_envs/LIBERO-{10,Spatial,Object,Goal,90}-v0``.
"""

from evolve_envs.registration import ENV_IDS, register_envs

register_envs()

__all__ = ["ENV_IDS", "register_envs"]
__version__ = "0.1.0"
