"""The route tests of `tests/reward/service/routes/test_routes.py`, run against Ray Serve.

Same assertions, same mock backend settings; only the server differs (2 Serve replicas behind
Serve's HTTP proxy instead of one uvicorn process). The three tests that compare one
process's `/metrics` counters before and after a request are replaced by replica-aware ones in
`test_ray_serve.py`.
"""

from __future__ import annotations

import pytest

from tests.reward.service.routes.test_routes import (  # noqa: F401 - collected here with this folder's fixtures
    test_capabilities_of_mock,
    test_data_url_frames_are_accepted,
    test_done_threshold_and_probability,
    test_every_reference_frame_is_checked_not_only_the_sampled_ones,
    test_health_and_healthcheck,
    test_jpeg_frames_keep_the_painted_integer,
    test_pairwise_critic_exact,
    test_pickle_scorer,
    test_pickle_scorer_answers_json_when_asked,
    test_reference_frames_are_accepted,
    test_score_inline_video_uses_last_sampled_frame,
    test_score_video_path,
    test_single_frame_trajectory_has_one_value,
    test_trajectory_skip_samples_like_vlac,
    test_trajectory_values_are_relative_to_first_frame,
    test_trajectory_values_reproduce_painted_progress,
)
from tests.reward.service.test_compat import (  # noqa: F401 - the VLAC client's contract over Serve
    test_vlac_shaped_client_uses_every_progress_route,
)

pytestmark = pytest.mark.slow
