"""HTTP clients for reward services: progress (VLAC), video score, pickle scorer, Robometer.

An :class:`EndpointPool` balances requests over the replicas (whoever opens it closes it, or
hands it over with ``close_pool=True``); each client speaks one protocol and returns
:class:`CallResult` values, falling back or raising per its failure policy.

>>> import httpx
>>> import numpy as np
>>> from evolve_envs.reward.clients import EndpointPool, ProgressClient
>>> service = httpx.MockTransport(lambda r: httpx.Response(200, json={"critic": 12.5}))
>>> frame_a = frame_b = np.zeros((32, 32, 3), np.uint8)
>>> with EndpointPool("http://127.0.0.1:8111", timeout=120, transport=service) as pool:
...     ProgressClient(pool).pairwise_critic("open the drawer", frame_a, frame_b).value
12.5
"""

from evolve_envs.reward.clients.endpoint_pool import EndpointPool
from evolve_envs.reward.clients.endpoint_urls import endpoints_from_env, expand_endpoints
from evolve_envs.reward.clients.errors import (
    BadResponseError,
    ErrorKind,
    RequestRejectedError,
    RewardServiceError,
    ServiceTimeoutError,
    ServiceUnreachableError,
)
from evolve_envs.reward.clients.failover_transport import FailoverTransport
from evolve_envs.reward.clients.pickle_scorer_client import PickleScorerClient
from evolve_envs.reward.clients.progress_client import DoneResult, ProgressClient, TrajectoryValues
from evolve_envs.reward.clients.results import CallResult, ClientStats
from evolve_envs.reward.clients.robometer_client import RobometerClient, RobometerCurve
from evolve_envs.reward.clients.service_check import ServiceUnavailableError, check_service
from evolve_envs.reward.clients.video_score_client import VideoScoreClient

__all__ = [
    "BadResponseError",
    "CallResult",
    "ClientStats",
    "DoneResult",
    "EndpointPool",
    "ErrorKind",
    "FailoverTransport",
    "PickleScorerClient",
    "ProgressClient",
    "RequestRejectedError",
    "RewardServiceError",
    "RobometerClient",
    "RobometerCurve",
    "ServiceTimeoutError",
    "ServiceUnavailableError",
    "ServiceUnreachableError",
    "TrajectoryValues",
    "VideoScoreClient",
    "check_service",
    "endpoints_from_env",
    "expand_endpoints",
]
