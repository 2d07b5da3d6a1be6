"""The shared wire models and the restricted pickle codec."""

from __future__ import annotations

import math
import os
import pickle

import pydantic
import pytest

from evolve_envs.reward.protocol.body_budget import BodyBudgetError
from evolve_envs.reward.protocol.pickle_codec import (
    UnsafePickleError,
    safe_pickle_dumps,
    safe_pickle_loads,
)
from evolve_envs.reward.protocol.wire import (
    Capabilities,
    PickleScoreRequest,
    ScoreRequest,
    TrajectoryCriticRequest,
    TrajectoryCriticResponse,
)
from evolve_envs.reward.service.faults import FaultSpec


class _Evil:
    def __reduce__(self):  # noqa: ANN204
        return (os.system, ("echo should-never-run",))


@pytest.mark.parametrize(
    "value",
    [
        {"images": [b"\xff\xd8", b""], "prompts": ["a", "b"], "metadata": {"k": [1, 2.5, None]}},
        {"scores": [0.0, 1.0, -3.5]},
        {"error": "boom"},
        (1, "two", b"three", True, None),
        [],
    ],
)
@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_plain_data_round_trips(value: object, protocol: int) -> None:
    assert safe_pickle_loads(pickle.dumps(value, protocol=protocol)) == value


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (pickle.dumps(_Evil()), "global (posix|os).system"),
        (pickle.dumps(os.system), "global (posix|os).system"),
        (pickle.dumps({1, 2}), "holds a set"),
        (pickle.dumps(bytearray(b"x"), protocol=5), "global|bytearray"),
        (pickle.dumps(1 + 2j), "global"),
        (b"not a pickle", "malformed pickle"),
        (b"", "malformed pickle"),
        (pickle.dumps([[[[[[[[[[[]]]]]]]]]]]) * 1, None),
    ],
)
def test_restricted_unpickler_rejects_globals_and_foreign_types(payload: bytes, message) -> None:  # noqa: ANN001
    if message is None:  # nested but plain: accepted
        assert safe_pickle_loads(payload)
        return
    with pytest.raises(UnsafePickleError, match=message):
        safe_pickle_loads(payload)


def test_bytes_in_python2_protocols_need_a_global_and_are_refused() -> None:
    assert safe_pickle_loads(pickle.dumps({"a": [1, "x"]}, protocol=0)) == {"a": [1, "x"]}
    with pytest.raises(UnsafePickleError, match="_codecs.encode"):
        safe_pickle_loads(pickle.dumps(b"bytes", protocol=2))


def test_shared_references_count_each_time_and_cycles_are_refused() -> None:
    inner: list = [1]
    for _ in range(60):  # 2**60 paths if walked naively: refused at once, by its expanded size
        inner = [inner, inner]
    with pytest.raises(BodyBudgetError, match="expands to more than 100000 values") as info:
        safe_pickle_loads(pickle.dumps({"metadata": inner}))
    assert info.value.field == "metadata" and info.value.status_code == 413
    small: list = [1, 2]
    assert safe_pickle_loads(pickle.dumps({"a": [small, small]})) == {"a": [[1, 2], [1, 2]]}
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(BodyBudgetError, match="prompts: holds a reference to itself") as info:
        safe_pickle_loads(pickle.dumps({"prompts": cyclic}))
    assert info.value.status_code == 422
    # Trusted data may skip the budget (cycles are still walked in linear time).
    assert safe_pickle_loads(pickle.dumps(cyclic), budget=None)[0] is not None


def test_too_deep_nesting_is_rejected() -> None:
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(UnsafePickleError, match="nested"):
        safe_pickle_loads(pickle.dumps(deep))


def test_safe_dumps_refuses_foreign_types() -> None:
    with pytest.raises(UnsafePickleError):
        safe_pickle_dumps({"scores": [object()]})
    assert safe_pickle_loads(safe_pickle_dumps({"scores": [1.5]})) == {"scores": [1.5]}


def test_request_defaults_match_design() -> None:
    req = TrajectoryCriticRequest(task="t", frames=["a"])
    assert (req.skip, req.batch_size, req.reference, req.ref_num) == (5, 8, None, None)
    score = ScoreRequest(task_text="t", video_path="/x.mp4")
    assert (score.nframes, score.max_pixels) == (16, 200704)
    with pytest.raises(pydantic.ValidationError, match="exactly one"):
        ScoreRequest(task_text="t")
    with pytest.raises(pydantic.ValidationError, match="exactly one"):
        ScoreRequest(task_text="t", video_path="/x.mp4", video_b64="AAAA")


def test_responses_reject_non_finite_numbers_and_bad_lengths() -> None:
    with pytest.raises(pydantic.ValidationError):
        TrajectoryCriticResponse(value_list=[0.0, math.nan], critic_list=[1.0])
    with pytest.raises(pydantic.ValidationError):
        TrajectoryCriticResponse(value_list=[0.0], critic_list=[1.0])
    assert TrajectoryCriticResponse(value_list=[0.0, 1.0], critic_list=[1.0])


def test_pickle_request_model_checks_lengths() -> None:
    with pytest.raises(pydantic.ValidationError, match="same length"):
        PickleScoreRequest(images=[b"a"], prompts=["a", "b"])
    assert PickleScoreRequest(images=[b"a"], prompts=["p"]).metadata == {}


def test_capabilities_and_fault_spec_defaults() -> None:
    caps = Capabilities(backend="x")
    assert caps.progress and not (caps.pairwise or caps.done or caps.video or caps.image_score)
    spec = FaultSpec(mode="status")
    assert (spec.status, spec.count, spec.routes) == (503, None, None)


def test_out_of_sequence_memo_index_is_refused_before_unpickling() -> None:
    """LONG_BINPUT with index ~2^29 in 13 bytes: the C unpickler would size its memo array to
    the index (gigabytes); a pickler numbers memo entries in sequence, so it is refused first."""
    with pytest.raises(UnsafePickleError, match="memo entry 218104063 after only 0 entries"):
        safe_pickle_loads(b"}\x85\x8f}r\xff\x00\x00\r\x87\x8d\x85.")
    # protocols 0-3 number their memo with PUT/BINPUT, protocol 4+ with MEMOIZE: all accepted
    for protocol in range(6):
        value = {"a": ["x", "x"], "b": ("y", 1.5)}
        assert safe_pickle_loads(pickle.dumps(value, protocol=protocol)) == value
