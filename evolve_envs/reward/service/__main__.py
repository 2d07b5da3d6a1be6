"""``python -m evolve_envs.reward.service``: the reward server, as ``evolve-reward-server`` runs it.

The service starts itself through this module (the embedded service's child process, the
launcher's replicas), so starting a server never imports the command-line tools.
"""

import sys

from evolve_envs.reward.service.hosting.serve import main

sys.exit(main())
