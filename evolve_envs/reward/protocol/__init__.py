"""What the reward service and its clients share, and nothing else.

* :mod:`evolve_envs.reward.protocol.wire` — pydantic models of every request and response
  (docs/PROTOCOLS.md);
* :mod:`evolve_envs.reward.protocol.pickle_codec` — the pickle scorer's restricted codec (its
  opcode scan in ``pickle_scan``, NumPy stand-ins in ``numpy_placeholders``, the accepted
  types and ``UnsafePickleError`` in ``pickle_types``);
* :mod:`evolve_envs.reward.protocol.critic_math` — the progress arithmetic (critic accumulation
  and its inverse).

It imports only the standard library, NumPy and pydantic: clients, wrappers and the service
import it; it imports nothing from them.
"""
