"""`evolve-reward-server`: the console script of the reward server.

The program lives with the service (:mod:`evolve_envs.reward.service.hosting.serve`, which documents
every option; ``python -m evolve_envs.reward.service`` runs the same), so the service starts
without the command-line tools.
"""

from __future__ import annotations

import sys

from evolve_envs.reward.service.hosting.serve import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
