"""The reward service's routes, one router per protocol.

* :mod:`~evolve_envs.reward.service.routes.service` — ``/health``, ``/capabilities``, ``/metrics``;
* :mod:`~evolve_envs.reward.service.routes.progress` — the VLAC-compatible progress routes;
* :mod:`~evolve_envs.reward.service.routes.video` — ``/score`` (video scorers);
* :mod:`~evolve_envs.reward.service.routes.pickle_scorer` — ``/pickle`` (RLinf-RLAIF's scorer);
* :mod:`~evolve_envs.reward.service.routes.robometer` — Robometer's evaluation routes;
* :mod:`~evolve_envs.reward.service.routes.json_budget` — the route class that checks a JSON body
  against the decoded-body budget before it is parsed.
"""
