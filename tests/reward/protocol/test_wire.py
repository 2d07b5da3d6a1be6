"""The shared wire models and the restricted pickle codec."""

from __future__ import annotations

import io
import math
import os
import pickle
import pickletools

import numpy as np
import pydantic
import pytest

from evolve_envs.reward.protocol.body_budget import BodyBudgetError
from evolve_envs.reward.protocol.numpy_placeholders import NUMPY_GLOBALS
from evolve_envs.reward.protocol.pickle_codec import (
    _NoGlobalsUnpickler,
    safe_pickle_dumps,
    safe_pickle_loads,
)
from evolve_envs.reward.protocol.pickle_types import UnsafePickleError
from evolve_envs.reward.protocol.wire import (
    Capabilities,
    PickleScoreRequest,
    ScoreRequest,
    TrajectoryCriticRequest,
    TrajectoryCriticResponse,
)
from evolve_envs.reward.service.middleware.faults import FaultSpec
from tests.fuzz.hostile import DTYPE_SUBARRAY_CRASH


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


# ------------------------------------------------ numpy values: built from the wire, never live


def _u(text: str) -> bytes:
    """SHORT_BINUNICODE `text`."""
    data = text.encode()
    return b"\x8c" + bytes([len(data)]) + data


def _plain(value: object) -> bytes:
    """The opcodes of a plain value, without PROTO, memo or STOP (to splice into a pickle)."""
    return pickletools.optimize(pickle.dumps(value, protocol=3))[2:-1]


def _dtype(name: str) -> bytes:
    """`numpy.dtype(name, False, True)`, as numpy pickles it."""
    return b"cnumpy\ndtype\n" + _u(name) + b"\x89\x88\x87R"


def _dtype_built(name: str, state: bytes) -> bytes:
    return _dtype(name) + state + b"b"


def _scalar(dtype: bytes, data: bytes) -> bytes:
    return b"cnumpy._core.multiarray\nscalar\n" + dtype + _plain(data) + b"\x86R"


_RECONSTRUCT = b"cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\n"


def _array(shape: tuple[int, ...], dtype: bytes, raw: bytes, fortran: bool = False) -> bytes:
    head = _RECONSTRUCT + _plain((0,))
    state = b"(" + _plain(1) + _plain(shape) + dtype + _plain(fortran) + _plain(raw) + b"t"
    return head + _plain(b"b") + b"\x87R" + state + b"b"


def _body(value: bytes) -> bytes:
    """A request-shaped pickle whose `metadata.x` is `value`'s opcodes."""
    return b"\x80\x04}" + _u("metadata") + b"}" + _u("x") + value + b"ss."


#: what numpy writes for `np.dtype("S8")`: version 3, no byte order, itemsize 8, alignment 1
_S8_STATE = _plain((3, "|", None, None, None, 8, 1, 0))


def test_the_141_byte_dtype_subarray_pickle_is_refused_before_any_array_exists() -> None:
    """F2: `numpy.dtype('S8')` rebuilt (BUILD) with a subarray of 1,000 x S65536, then handed
    to `scalar` with 8 bytes. The old stand-ins returned live dtypes, so numpy's own
    `__setstate__` took the subarray and `np.frombuffer` made a 64 MB view over 8 bytes
    (SIGSEGV when read). Now the dtype is a placeholder that refuses any state but numpy's
    plain one (the subprocess tests show the server and the client process living)."""
    payload = DTYPE_SUBARRAY_CRASH
    assert len(payload) == 141
    ops = [op.name for op, _, _ in pickletools.genops(payload)]
    assert ops.count("BUILD") == 1 and ops.count("REDUCE") == 3
    with pytest.raises(UnsafePickleError, match=r"gives \|S8 a subarray"):
        safe_pickle_loads(payload)
    with pytest.raises(UnsafePickleError, match=r"gives \|S8 a subarray"):  # scan bypassed
        _NoGlobalsUnpickler(io.BytesIO(payload)).load()


_SUPPORTED = [
    np.float16(1.5), np.float32(-2.25), np.float64(1e300), np.longdouble(3.5),
    np.int8(-3), np.int16(300), np.int32(-(2**31)), np.int64(2**62), np.uint8(255),
    np.uint16(65535), np.uint32(2**32 - 1), np.uint64(2**64 - 1), np.bool_(True),
    np.complex64(1 + 2j), np.complex128(-1j), np.str_("héllo"), np.bytes_(b"a\0b"),
    np.arange(6, dtype=">i4").reshape(2, 3), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    np.array(["a", "bcd"]), np.array([b"x", b"yz"]), np.zeros((0, 3)), np.array(5),
    np.array([True, False]), np.arange(24, dtype="<u2").reshape(2, 3, 4).transpose(1, 0, 2),
    np.arange(24).reshape(2, 3, 4)[:, ::2], np.array([1 + 1j], ">c16"), np.zeros((2, 0, 3)),
]  # fmt: skip


@pytest.mark.parametrize("protocol", [3, 4, 5])
@pytest.mark.parametrize("value", _SUPPORTED, ids=lambda v: f"{type(v).__name__}-{v.dtype.str}")
def test_numpy_values_of_every_supported_dtype_round_trip(value: object, protocol: int) -> None:
    out = safe_pickle_loads(pickle.dumps({"v": value, "again": (value, 1)}, protocol=protocol))
    got = out["v"]
    assert type(got) is type(value) and got.dtype == value.dtype
    assert out["again"][0] is got  # shared references stay shared
    if isinstance(value, np.ndarray):
        assert got.shape == value.shape and np.array_equal(got, value)
        assert got.base is None and got.flags.writeable  # a fresh copy, not a view of the wire
    else:
        assert got == value


@pytest.mark.parametrize(
    "name", ["numpy dtype", "numpy ndarray", "numpy._core.multiarray _reconstruct",
             "numpy.core.multiarray _reconstruct", "numpy._core.multiarray scalar",
             "numpy.core.multiarray scalar", "numpy._core.numeric _frombuffer"],
)  # fmt: skip
@pytest.mark.parametrize(
    "state", [{"__call__": 1}, (None, {"__doc__": "x"}), None, (3, "<")], ids=repr
)
def test_build_on_a_stand_in_is_refused(name: str, state: object) -> None:
    """BUILD on a global's stand-in would set its attributes (or state) for every later
    request in the process: refused by the opcode scan, and by the stand-in itself."""
    module, qualname = name.split()
    payload = b"\x80\x04c" + f"{module}\n{qualname}\n".encode() + _plain(state) + b"b."
    with pytest.raises(UnsafePickleError, match=f"sets the state of the global {module}"):
        safe_pickle_loads(payload)
    with pytest.raises(UnsafePickleError, match="sets the (state|attribute)"):
        _NoGlobalsUnpickler(io.BytesIO(payload)).load()  # without the scan
    stand_in = NUMPY_GLOBALS[(module, qualname)]
    assert not hasattr(stand_in, "__dict__")
    with pytest.raises(UnsafePickleError):
        stand_in.anything = 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"]" + _plain({"a": 1}) + b"b", "state of a value that takes no state"),  # a list
        (b"}" + _plain({"a": 1}) + b"b", "state of a value that takes no state"),  # a dict
        (_scalar(_dtype("f8"), b"\0" * 8) + b"Nb", "state of a value that takes no state"),
        (_dtype_built("S8", _S8_STATE) + _S8_STATE + b"b", "dtype whose state is already set"),
        (_array((1,), _dtype("u1"), b"\0") + b"Nb", "array whose state is already set"),
        (_dtype("u1") + b"\x85" + _plain(None) + b"b", "state of a value that takes no"),
    ],
    ids=["list", "dict", "scalar", "dtype_twice", "array_twice", "tuple_around_a_dtype"],
)
def test_build_on_anything_but_a_fresh_dtype_or_array_is_refused(
    value: bytes, message: str
) -> None:
    with pytest.raises(UnsafePickleError, match=message):
        safe_pickle_loads(_body(value))


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ((3, "|", None, ("a",), None, 8, 1, 0), "field names or fields"),
        ((3, "|", None, None, {"a": 1}, 8, 1, 0), "field names or fields"),
        ((3, "|", None, None, None, 65536, 1, 0), r"does not match \|S8 \(itemsize 65536"),
        ((3, "|", None, None, None, 8, 16, 0), "alignment 16"),
        ((3, "|", None, None, None, 8, 1, 1 << 20), "flags 1048576"),
        ((4, "|", None, None, None, 8, 1, 0), "must be numpy's own"),
        ((3, "?", None, None, None, 8, 1, 0), "must be numpy's own"),
        ((3, "|", None, None, None, 8, 1), "must be numpy's own"),
        ({"descr": "O"}, "must be numpy's own"),
    ],
)
def test_a_dtype_takes_only_numpys_plain_state(state: object, message: str) -> None:
    value = _scalar(_dtype_built("S8", _plain(state)), b"A" * 8)
    with pytest.raises(UnsafePickleError, match=message):
        safe_pickle_loads(_body(value))


def test_a_dtype_state_may_set_the_byte_order_only() -> None:
    big = _plain((3, ">", None, None, None, -1, -1, 0))
    one = b"?\xf0" + b"\0" * 6  # 1.0 as a big-endian float64
    scalar = safe_pickle_loads(_body(_scalar(_dtype_built("f8", big), one)))["metadata"]["x"]
    assert scalar == 1.0  # read big-endian (numpy scalars then hold it in native order)
    array = safe_pickle_loads(_body(_array((1,), _dtype_built("f8", big), one)))["metadata"]["x"]
    assert array.dtype.str == ">f8" and array.tolist() == [1.0]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (_scalar(_dtype("f8"), b"\0" * 7), "needs 8 bytes, the pickle gives 7"),
        (_scalar(_dtype("f8"), b"\0" * 9), "needs 8 bytes, the pickle gives 9"),
        (_array((1000, 1000), _dtype("f8"), b"\0" * 8), "needs 8000000 bytes, the pickle gives 8"),
        (_array((2,), _dtype("f8"), b"\0" * 24), "needs 16 bytes, the pickle gives 24"),
        (_array((-1,), _dtype("f8"), b"\0" * 8), "malformed numpy array shape"),
        (_array((2**62,), _dtype("u1"), b""), "malformed numpy array shape"),
        (_array((1,) * 33, _dtype("u1"), b"\0"), "malformed numpy array shape"),
        (_array((1,), b"N", b"\0"), "malformed numpy array dtype"),
        (_scalar(_dtype("O"), b"\0" * 8), "numpy dtype\\('O'\\)"),
        (_scalar(_dtype("V8"), b"\0" * 8), "numpy dtype\\('V8'\\)"),
        (_scalar(_dtype("M8[s]"), b"\0" * 8), "numpy dtype\\('<M8\\[s\\]'\\)"),
        (_scalar(_dtype("(2,)f8"), b"\0" * 16), "numpy dtype"),
        (_scalar(_dtype("f8,i4"), b"\0" * 12), "numpy dtype"),
        (_scalar(_dtype("U" + "9" * 40), b""), "numpy dtype must be given by its name"),
        (_scalar(_dtype("nonsense"), b""), "unknown numpy dtype 'nonsense'"),
        (_dtype("f8"), "holds a numpy dtype object"),
        (_RECONSTRUCT + _plain([0]) + _plain(b"b") + b"\x87R", "malformed numpy array recon"),
        (_RECONSTRUCT + _plain((0,)) + _plain(b"b") + b"\x87R", "without its data"),  # no BUILD
        (b"cnumpy\nndarray\n" + _plain((1,)) + b"R", "calls numpy.ndarray directly"),
    ],
)
def test_malformed_numpy_values_are_refused(value: bytes, message: str) -> None:
    with pytest.raises(UnsafePickleError, match=message):
        safe_pickle_loads(_body(value))


def test_an_empty_array_with_a_huge_dimension_counts_the_lists_it_becomes() -> None:
    """Shape (2^40, 0): no element and no byte, but `tolist` would make 2^40 empty lists."""
    with pytest.raises(BodyBudgetError, match="expands to more than 100000 values"):
        safe_pickle_loads(_body(_array((2**40, 0), _dtype("u1"), b"")))
    empty = safe_pickle_loads(_body(_array((0, 2**40), _dtype("u1"), b"")))["metadata"]["x"]
    assert empty.shape == (0, 2**40) and empty.size == 0
