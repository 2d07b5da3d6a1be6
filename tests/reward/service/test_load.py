"""Load: 32 concurrent clients, a few hundred requests, every answer matches its request."""

from __future__ import annotations

import threading

import httpx

from evolve_envs.reward.service.backends.mock import mock_critic
from tests.helpers.svc_helpers import painted_b64

CLIENTS = 32
PER_CLIENT = 10

LEVELS = {p: painted_b64(p, size=16) for p in range(101)}


def test_32_concurrent_clients_get_their_own_answers(mock_service) -> None:  # noqa: ANN001
    mismatches: list[str] = []
    errors: list[BaseException] = []
    answered = [0] * CLIENTS
    barrier = threading.Barrier(CLIENTS)

    def client_loop(k: int) -> None:
        try:
            with httpx.Client(base_url=mock_service.url, timeout=60, trust_env=False) as c:
                barrier.wait()
                for j in range(PER_CLIENT):
                    n = k * PER_CLIENT + j
                    pa, pb = n % 97, (n * 37) % 101
                    if j % 3 == 2:
                        frames = [LEVELS[0], LEVELS[pa], LEVELS[pb]]
                        body = {"task": f"c{k}", "frames": frames, "skip": 1}
                        got = c.post("/trajectory-critic", json=body).json()["critic_list"]
                        want = [mock_critic(0, pa), mock_critic(pa, pb)]
                    else:
                        body = {"task": f"c{k}", "image_a": LEVELS[pa], "image_b": LEVELS[pb]}
                        got = c.post("/pairwise-critic", json=body).json()["critic"]
                        want = mock_critic(pa, pb)
                    if got != want:
                        mismatches.append(f"client {k} request {j}: {got} != {want}")
                    answered[k] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=client_loop, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert not mismatches, mismatches[:5]
    assert answered == [PER_CLIENT] * CLIENTS
