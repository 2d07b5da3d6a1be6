"""Structure-aware hypothesis strategies for every decoder behind a route of the reward service.

Each strategy draws a `Case` (`tests.fuzz.harness`): a request some route will decode.

* `numpy_state_cases`: `/pickle` bodies with numpy values written opcode by opcode: dtypes
  rebuilt (BUILD) with hostile states (subarrays, fields, lying sizes and flags), scalars and
  arrays whose bytes do not match their dtype and shape, BUILD on the stand-ins themselves.
* `pickle_cases`: `/pickle` bodies built from request-shaped dicts whose fields hold aliased
  containers (one list reached from many places), deep nesting, cycles, numpy arrays, images of
  every kind below; pickled with a random protocol, then perhaps truncated, a byte flipped,
  four bytes overwritten with a large number, or an opcode appended whose argument lies (memo
  indices, counted lengths, frame sizes).
* `image_cases`: PNG and JPEG frames (several modes and sizes) whose headers lie about their size
  (IHDR with and without a fixed CRC, JPEG SOF), truncated, with bytes flipped or huge ancillary
  chunks, sent as base64 to the JSON routes or as bytes to `/pickle`.
* `video_cases`: a small MP4 or Matroska file with its declared frame size or counts rewritten,
  truncated or flipped, sent to `/score`.
* `json_cases`: bodies for every JSON route: fields of the wrong type, deep or wide values,
  numbers past any range, invalid UTF-8, truncated documents.
* `chat_cases`: `/v1/chat/completions` bodies shaped as RLinf's API reward worker sends them,
  with hostile parts: damaged images as data URLs, URLs that are not data URLs, wrong part
  types, odd `views` / `frame_orientation` / `model` values, text past the limit.
* `http_cases`: raw HTTP requests: huge or many header lines, lying or malformed
  `Content-Length`, broken chunked encoding, browser form content types.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import pickle
import pickletools
import struct
import zlib
from typing import Any

import numpy as np
from hypothesis import strategies as st
from PIL import Image

from tests.fuzz.harness import JSON, PICKLE, Case
from tests.fuzz.hostile import tiny_mp4

__all__ = [
    "chat_cases",
    "http_cases",
    "image_cases",
    "json_cases",
    "numpy_state_cases",
    "pickle_cases",
    "video_cases",
]

JSON_ROUTES = (
    "/trajectory-critic",
    "/pairwise-critic",
    "/done",
    "/score",
    "/v1/chat/completions",
    "/evaluate_batch",
)

# ------------------------------------------------------------------------------------ images


@functools.lru_cache(maxsize=32)
def _image(fmt: str, mode: str, width: int, height: int) -> bytes:
    img = Image.new(mode, (width, height))
    if mode in ("RGB", "L", "RGBA"):
        img.paste(200 if mode == "L" else (200, 100, 50, 255)[: len(mode)], (0, 0, 4, 4))
    buf = io.BytesIO()
    if fmt == "JPEG":
        img.convert("RGB").save(buf, "JPEG", quality=70)
    else:
        img.save(buf, "PNG")
    return buf.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


@st.composite
def image_bytes(draw: st.DrawFn) -> bytes:
    """A PNG or JPEG, valid or lying about its size, truncated or otherwise damaged."""
    fmt = draw(st.sampled_from(["PNG", "JPEG"]))
    modes = ["RGB", "L", "RGBA", "P", "I;16", "1", "LA"] if fmt == "PNG" else ["RGB", "L"]
    mode = draw(st.sampled_from(modes))
    side = st.integers(1, 48)
    data = bytearray(_image(fmt, mode, draw(side), draw(side)))
    big = st.one_of(st.integers(0, 70000), st.sampled_from([0, 4097, 65535, 2**31 - 1, 2**32 - 1]))
    damage = draw(
        st.sampled_from(["none", "size", "size_crc", "truncate", "flip", "chunk", "garbage"])
    )
    if damage in ("size", "size_crc"):
        if fmt == "PNG":
            at = data.index(b"IHDR")
            data[at + 4 : at + 12] = struct.pack(">II", draw(big), draw(big))
            if damage == "size_crc":
                crc = zlib.crc32(bytes(data[at : at + 17])) & 0xFFFFFFFF
                data[at + 17 : at + 21] = struct.pack(">I", crc)
        else:
            at = data.find(b"\xff\xc0")
            data[at + 5 : at + 9] = struct.pack(">HH", draw(big) & 0xFFFF, draw(big) & 0xFFFF)
    elif damage == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif damage == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        data[at] ^= 1 << draw(st.integers(0, 7))
    elif damage == "chunk" and fmt == "PNG":
        # an ancillary chunk after IHDR: a big text chunk, or a compressed bomb in zTXt/iCCP
        kind = draw(st.sampled_from([b"tEXt", b"zTXt", b"iCCP", b"eXIf", b"sPLT"]))
        payload = b"k\0\0" + zlib.compress(b"\0" * draw(st.integers(0, 8 << 20)), 9)
        at = data.index(b"IHDR") + 21
        data[at:at] = _png_chunk(kind, payload)
    elif damage == "garbage":
        data = bytearray(draw(st.binary(max_size=256)))
        if draw(st.booleans()):
            data[0:0] = b"\x89PNG\r\n\x1a\n" if fmt == "PNG" else b"\xff\xd8\xff"
    return bytes(data)


@st.composite
def image_cases(draw: st.DrawFn) -> Case:
    """Damaged or lying images through the JSON routes (base64) or `/pickle` (bytes)."""
    images = draw(st.lists(image_bytes(), min_size=1, max_size=4))
    route = draw(st.sampled_from(
        ["/pickle", "/trajectory-critic", "/pairwise-critic", "/done", "/v1/chat/completions"]
    ))  # fmt: skip
    if route == "/pickle":
        body = pickle.dumps({"images": images, "prompts": ["p"] * len(images)}, protocol=4)
        return Case("POST", route, PICKLE, body)
    b64 = [base64.b64encode(image).decode() for image in images]
    if route == "/v1/chat/completions":
        return Case("POST", route, JSON, _chat_body([f"data:image/png;base64,{b}" for b in b64]))
    if route == "/trajectory-critic":
        doc: dict[str, Any] = {"task": "t", "frames": b64, "skip": 1}
    elif route == "/pairwise-critic":
        doc = {"task": "t", "image_a": b64[0], "image_b": b64[-1]}
    else:
        doc = {"task": "t", "first_frame": b64[0], "prev_frame": b64[-1], "curr_frame": b64[0]}
    return Case("POST", route, JSON, json.dumps(doc).encode())


# ------------------------------------------------------------------------------------ pickle

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=16),
    st.binary(max_size=16),
)


@st.composite
def aliased_tree(draw: st.DrawFn) -> Any:
    """A value whose containers are shared: level k holds `fan` references to level k-1."""
    node: Any = draw(st.one_of(_scalars, st.lists(_scalars, max_size=4)))
    for _ in range(draw(st.integers(0, 50))):
        fan = draw(st.integers(1, 12))
        kind = draw(st.sampled_from(["list", "tuple", "dict", "list", "mixed"]))
        if kind == "list":
            node = [node] * fan
        elif kind == "tuple":
            node = (node,) * fan
        elif kind == "dict":
            node = {f"k{i}": node for i in range(fan)}
        else:
            node = [node, {"x": node, "y": (node, node)}, draw(_scalars)]
    return node


@st.composite
def numpy_values(draw: st.DrawFn) -> Any:
    dtype = draw(st.sampled_from(["uint8", "int64", "float32", "complex64", "bool", "<U4", "S3"]))
    shape = draw(st.sampled_from([(), (0,), (3,), (2, 3), (1 << 17,), (300, 300)]))
    value = np.zeros(shape, dtype=dtype)
    return value[()] if shape == () else value


@st.composite
def field_values(draw: st.DrawFn) -> Any:
    return draw(
        st.one_of(
            _scalars,
            aliased_tree(),
            numpy_values(),
            st.lists(image_bytes(), max_size=3),
            st.lists(st.text(max_size=40), max_size=5),
            st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=30),
        )
    )


@st.composite
def pickle_cases(draw: st.DrawFn) -> Case:
    """`/pickle` bodies: request-shaped dicts with hostile fields, then maybe damaged."""
    keys = st.sampled_from(["images", "prompts", "metadata", "meta_datas", "only_strict", "x"])
    body: Any = draw(st.dictionaries(keys, field_values(), max_size=5))
    if draw(st.booleans()):
        body.setdefault("images", draw(st.lists(image_bytes(), min_size=1, max_size=2)))
    if draw(st.booleans()):  # most hostile pickles hide in one field (e.g. metadata)
        body[draw(keys)] = draw(aliased_tree())
    if draw(st.integers(0, 4)) == 0:  # a field that refers to itself
        loop: list = [draw(_scalars)]
        loop.append(loop)
        body[draw(keys)] = draw(st.sampled_from([loop, [loop], {"a": loop}]))
    if draw(st.integers(0, 6)) == 0:
        body = draw(st.sampled_from([[body], (body,), draw(_scalars)]))
    # protocols 0-2 write bytes through a global (refused): mostly 3-5
    protocol = draw(st.sampled_from([4, 5, 3, 4, 5, 2, 0]))
    data = bytearray(pickle.dumps(body, protocol=protocol))
    damage = draw(st.sampled_from(["none"] * 4 + ["truncate", "flip", "length", "opcode"]))
    if damage == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif damage == "flip":
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    elif damage == "length" and len(data) > 8:  # a counted length (or anything) that lies
        at = draw(st.integers(0, len(data) - 4))
        data[at : at + 4] = struct.pack("<I", draw(st.sampled_from([2**31 - 1, 2**30, 2**24])))
    elif damage == "opcode" and data.endswith(b"."):  # an opcode whose argument lies, at the end
        n = draw(st.sampled_from([2**21, 2**23, 2**25, 2**27, 2**31 - 1]))  # under RLIMIT_AS too
        lie = draw(
            st.sampled_from(
                [
                    b"r" + struct.pack("<I", n),  # LONG_BINPUT: memo index
                    b"p%d\n" % n,  # PUT: memo index (text)
                    b"j" + struct.pack("<I", n),  # LONG_BINGET
                    b"\x8e" + struct.pack("<Q", n),  # BINBYTES8: length
                    b"\x95" + struct.pack("<Q", n),  # FRAME: length
                    b"\x8d" + struct.pack("<Q", n),  # BINUNICODE8: length
                    b"\x8b" + struct.pack("<i", n // 2),  # LONG4: length
                ]
            )
        )
        data[-1:] = lie + b"."
    content_type = draw(st.sampled_from([PICKLE, PICKLE, None, "text/plain", "application/json"]))
    return Case("POST", draw(st.sampled_from(["/pickle", "/"])), content_type, bytes(data))


# ------------------------------------------------------------------- numpy values, opcode by opcode


def _ops(value: Any) -> bytes:
    """The opcodes of a plain value, without PROTO, memo or STOP (to splice into a pickle)."""
    return pickletools.optimize(pickle.dumps(value, protocol=3))[2:-1]


_DTYPE_NAMES = ["S8", "f8", "i4", "u1", "b1", "c16", "U4", "S65536", "<f4", ">i2"]
_DTYPE_NAMES += ["O", "V8", "M8[s]", "(2,)f8", "f8,i4", "S0", "U2147483647", "S99999999999"]
_NUMPY_MODULES = ["numpy._core.multiarray", "numpy.core.multiarray"]


def _itemsize(name: str) -> int:
    try:
        return np.dtype(name).itemsize
    except (TypeError, ValueError):
        return 8


@st.composite
def _dtype_ops(draw: st.DrawFn, depth: int = 0) -> tuple[bytes, int]:
    """`numpy.dtype(name, False, True)`, then perhaps a BUILD with a state numpy's own
    `__setstate__` would take: a subarray (of another dtype), field names, fields, an item
    size, alignment or flags that lie, a byte order, a wrong version or length. Also the item
    size the value claims (what a matching scalar's data length is drawn from)."""
    name = draw(st.sampled_from(_DTYPE_NAMES))
    size = _itemsize(name)
    ops = b"cnumpy\ndtype\n" + _ops(name) + _ops(False) + _ops(True) + b"\x87R"
    mode = draw(st.sampled_from(["plain", "state", "subarray"]))
    if mode == "plain":
        return ops, size
    if mode == "subarray" and depth == 0:  # numpy's own state but for a (large) subarray: F2
        inner = draw(st.sampled_from(["S65536", "f8", "U4", "u1"]))
        shape = draw(st.sampled_from([(1000,), (65536,), (64, 1024), (2**31 - 1,), (1,)]))
        sub = b"cnumpy\ndtype\n" + _ops(inner) + _ops(False) + _ops(True) + b"\x87R"
        state = b"(" + _ops(3) + _ops(draw(st.sampled_from(["|", "<"]))) + sub + _ops(shape)
        state += b"\x86NN" + _ops(size) + _ops(draw(st.sampled_from([1, 4, 8]))) + _ops(0)
        return ops + state + b"tb", size
    big = st.sampled_from([size, size, -1, 0, 1, 8, 65536, 2**31 - 1, 2**40])
    subarray = b"N"
    if depth < 2 and draw(st.booleans()):  # (dtype, shape): the F2 crash's subarray
        shape = draw(st.lists(st.sampled_from([1, 2, 1000, 65536, 2**31 - 1]), max_size=3))
        subarray = draw(_dtype_ops(depth + 1))[0] + _ops(tuple(shape)) + b"\x86"
    names = _ops(draw(st.sampled_from([None, None, None, ("a",), ("a", "b")])))
    fields = _ops(draw(st.sampled_from([None, None, None, {"a": 1}, {}])))
    version = draw(st.sampled_from([3, 3, 3, 4, 2]))
    order = draw(st.sampled_from(["|", "<", ">", "="]))
    elsize, alignment = draw(big), draw(st.sampled_from([1, -1, 4, 8, 16]))
    flags = draw(st.sampled_from([0, 0, 1, 8, 16, 63, -1]))
    state = b"(" + _ops(version) + _ops(order) + subarray + names + fields
    state += _ops(elsize) + _ops(alignment) + _ops(flags)
    if draw(st.integers(0, 5)) == 0:  # a state of the wrong length
        state += _ops(None)
    return ops + state + b"tb", elsize if elsize > 0 else size


@st.composite
def _numpy_value_ops(draw: st.DrawFn) -> bytes:
    """A numpy scalar or array (or a bare BUILD on a stand-in) built opcode by opcode, its
    data most often as long as its dtype claims."""
    kind = draw(st.sampled_from(["scalar", "scalar", "array", "frombuffer", "build_stand_in"]))
    module = draw(st.sampled_from(_NUMPY_MODULES))
    if kind == "build_stand_in":
        name = draw(st.sampled_from(["numpy dtype", "numpy ndarray", f"{module} scalar"]))
        state = draw(st.sampled_from([None, {"__call__": 1}, (None, {"__doc__": "x"}), (3,)]))
        return b"c" + name.replace(" ", "\n").encode() + b"\n" + _ops(state) + b"b"
    dtype, size = draw(_dtype_ops())
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 1000, 2**31, 2**40, -1]), max_size=3)))
    count = 1
    for n in shape:
        count *= max(n, 0)
    claimed = size if kind == "scalar" else size * count
    nbytes = draw(st.sampled_from([claimed, claimed, 0, 1, 7, 8, 16]))
    raw = _ops(bytes(min(nbytes, 1 << 16)))
    if kind == "scalar":
        return f"c{module}\nscalar\n".encode() + dtype + raw + b"\x86R"
    if kind == "frombuffer":
        order = _ops(draw(st.sampled_from(["C", "F", "K", "X"])))
        return b"cnumpy._core.numeric\n_frombuffer\n(" + raw + dtype + _ops(shape) + order + b"tR"
    head = f"c{module}\n_reconstruct\ncnumpy\nndarray\n".encode() + _ops((0,)) + _ops(b"b")
    state = b"(" + _ops(1) + _ops(shape) + dtype + _ops(draw(st.booleans())) + raw
    builds = draw(st.sampled_from([1, 1, 1, 0, 2]))  # none, or twice
    return head + b"\x87R" + (state + b"tb") * builds


@st.composite
def numpy_state_cases(draw: st.DrawFn) -> Case:
    """`/pickle` bodies whose `metadata` (or `images`) holds numpy values written opcode by
    opcode: dtypes rebuilt (BUILD) with hostile states, scalars and arrays whose data does not
    match their dtype and shape, BUILD on the stand-ins themselves. Before the codec built
    numpy values from checked parts only, the dtype states crashed the server (F2)."""
    values = draw(st.lists(_numpy_value_ops(), min_size=1, max_size=3))
    field = _ops(draw(st.sampled_from(["metadata", "images", "prompts"])))
    inner = b"}" + b"".join(_ops(f"x{i}") + v + b"s" for i, v in enumerate(values))
    body = b"\x80\x04}" + _ops("images") + _ops([_image("PNG", "RGB", 8, 8)]) + b"s"
    body += field + inner + b"s."
    return Case("POST", draw(st.sampled_from(["/pickle", "/"])), PICKLE, body)


# ------------------------------------------------------------------------------------- video


@functools.lru_cache(maxsize=2)
def _video(container: str) -> bytes:
    if container == "mp4":
        return tiny_mp4(32, 6)
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="matroska") as out:
        stream = out.add_stream("libx264", rate=4)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        for i in range(6):
            frame = np.full((32, 32, 3), i * 30, np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode())
    return buf.getvalue()


@st.composite
def video_cases(draw: st.DrawFn) -> Case:
    """`/score` videos with rewritten sizes and counts, truncated or flipped."""
    data = bytearray(_video(draw(st.sampled_from(["mp4", "mkv"]))))
    for _ in range(draw(st.integers(0, 3))):
        damage = draw(st.sampled_from(["field", "truncate", "flip", "size"]))
        if damage == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        elif not data:
            break
        elif damage == "flip":
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
        elif damage == "size" and b"avc1" in data:  # the sample entry's width and height
            at = data.index(b"avc1") + 28
            data[at : at + 4] = struct.pack(">HH", draw(st.integers(0, 65535)), 65535)
        else:  # a 4-byte field near a box/element header: sizes, counts, durations
            tag = draw(st.sampled_from([b"tkhd", b"mdhd", b"stsz", b"stts", b"stco", b"mvhd"]))
            base = data.find(tag)
            at = (base if base >= 0 else 0) + draw(st.integers(0, 40))
            value = draw(st.sampled_from([0, 1, 2**16, 2**31 - 1, 2**32 - 1]))
            data[at : at + 4] = struct.pack(">I", value)
    doc = {
        "task_text": "t",
        "video_b64": base64.b64encode(bytes(data)).decode(),
        "nframes": draw(st.integers(1, 16)),
    }
    return Case("POST", "/score", JSON, json.dumps(doc).encode())


# -------------------------------------------------------------------------------------- JSON

_json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
_json_value = st.recursive(
    _json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=40,
)
_FIELDS = {
    "/trajectory-critic": ["task", "frames", "reference", "skip", "ref_num", "batch_size"],
    "/pairwise-critic": ["task", "image_a", "image_b"],
    "/done": ["task", "first_frame", "prev_frame", "curr_frame", "reference"],
    "/score": ["task_text", "video_b64", "video_path", "nframes", "max_pixels", "backend_kwargs"],
    "/evaluate_batch": ["samples", "sample_type", "trajectory", "frames", "task", "frame_stride"],
    "/v1/chat/completions": [
        "model",
        "messages",
        "views",
        "frame_orientation",
        "trend_threshold",
        "stream",
    ],
}


@st.composite
def json_cases(draw: st.DrawFn) -> Case:
    """Bodies for the JSON routes: right names, wrong or hostile values, broken documents."""
    route = draw(st.sampled_from(JSON_ROUTES))
    doc = {name: draw(_json_value) for name in draw(st.sets(st.sampled_from(_FIELDS[route])))}
    shape = draw(st.sampled_from(["doc", "doc", "deep", "wide", "bignum", "utf8", "truncate"]))
    text = json.dumps(doc).encode()
    if shape in ("deep", "wide"):
        name = draw(st.sampled_from(_FIELDS[route]))
        n = draw(st.integers(1, 300_000))
        value = b"[" * n + b"]" * n if shape == "deep" else b"[" + b"0," * n + b"0]"
        text = b'{"' + name.encode() + b'": ' + value + b"}"
    elif shape == "bignum":
        name = draw(st.sampled_from(_FIELDS[route]))
        digits = draw(st.sampled_from([b"9" * 5000, b"1e999999", b"-0.0e-99999", b"1" * 400]))
        text = b'{"' + name.encode() + b'": ' + digits + b"}"
    elif shape == "utf8":
        text = text[:-1] + b', "task": "\xff\xfe\xed\xa0\x80"}'
    elif shape == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    return Case("POST", route, draw(st.sampled_from([JSON, JSON, None, "text/plain"])), text)


# ---------------------------------------------------------------------------------- chat


def _chat_body(urls: list[str], text: str = "Task: open the drawer", **extra: Any) -> bytes:
    content: list[Any] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    content.append({"type": "text", "text": text})
    doc = {"model": "trend", "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(doc).encode()


_hostile_part = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "input_audio", "video_url"]),
                           "image_url": _json_value}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries(
        {"url": st.sampled_from([
            "http://127.0.0.1:1/x.jpg", "file:///etc/passwd", "data:image/png;base64,", "data:,",
            "data:image/jpeg;base64,!!!!", "data:text/html;base64,PGI+", "data:image/png,AAAA",
        ])})}),
    st.fixed_dictionaries({"type": st.just("text"), "text": _json_value}),
    _json_value,
)  # fmt: skip


@st.composite
def chat_cases(draw: st.DrawFn) -> Case:
    """RLinf-shaped chat requests with one or more hostile pieces (see the module docstring)."""
    images = draw(st.lists(image_bytes(), min_size=0, max_size=4))
    urls = [f"data:image/{draw(st.sampled_from(['png', 'jpeg']))};base64,"
            + base64.b64encode(image).decode() for image in images]  # fmt: skip
    text = draw(st.sampled_from(["Task: open the drawer", "", "x" * 9000, "\ud800 task"]))
    extra = {
        name: draw(value)
        for name, value in {
            "views": st.one_of(st.integers(-2, 40), _json_value),
            "frame_orientation": st.sampled_from(["upright", "rot180", "raw", "sideways", 3]),
            "trend_threshold": st.one_of(st.floats(allow_nan=False), _json_value),
            "model": st.sampled_from(["trend", "progress", "gpt-4o", "", 7]),
            "stream": st.sampled_from([True, False, "yes"]),
        }.items()
        if draw(st.booleans())
    }
    doc = json.loads(_chat_body(urls, text, **extra))
    parts = doc["messages"][0]["content"]
    for _ in range(draw(st.integers(0, 3))):
        parts.insert(draw(st.integers(0, len(parts))), draw(_hostile_part))
    if draw(st.integers(0, 4)) == 0:
        doc["messages"].insert(0, {"role": draw(st.sampled_from(["system", 5, None])),
                                   "content": draw(_json_value)})  # fmt: skip
    return Case("POST", "/v1/chat/completions", JSON, json.dumps(doc).encode())


# -------------------------------------------------------------------------------------- HTTP


@st.composite
def http_cases(draw: st.DrawFn) -> Case:
    """Raw HTTP requests with hostile framing (sent on a socket, write side then closed)."""
    path = draw(st.sampled_from(["/pairwise-critic", "/pickle", "/health", "/score", "/x"]))
    method = draw(st.sampled_from([b"POST", b"GET", b"PUT", b"BREW", b"P\x00ST"]))
    headers = [b"Host: 127.0.0.1"]
    body = draw(st.binary(max_size=64))
    shape = draw(
        st.sampled_from(["long_line", "many", "length", "chunked", "form", "version", "pipeline"])
    )
    if shape == "long_line":
        headers.append(b"X-Long: " + b"a" * draw(st.integers(1000, 200_000)))
    elif shape == "many":
        headers += [b"X-H%d: v" % i for i in range(draw(st.integers(10, 5000)))]
    elif shape == "length":
        value = draw(st.sampled_from([b"-1", b"abc", b"99999999999999999999", b"10, 20", b""]))
        value = draw(st.sampled_from([value, str(len(body) + draw(st.integers(1, 9))).encode()]))
        headers.append(b"Content-Length: " + value)
    elif shape == "chunked":
        headers.append(b"Transfer-Encoding: chunked")
        size = draw(st.sampled_from([b"ffffffffffffffff", b"zz", b"5", b"-1", b"0"]))
        body = size + b"\r\n" + body + b"\r\n0\r\n\r\n"
    elif shape == "form":
        kind = draw(st.sampled_from([b"multipart/form-data; boundary=x", b"text/plain"]))
        headers.append(b"Content-Type: " + kind)
        headers.append(b"Content-Length: %d" % len(body))
    if shape != "length" and shape != "chunked" and shape != "form":
        headers.append(b"Content-Length: %d" % len(body))
    version = b"HTTP/1.1" if shape != "version" else draw(st.sampled_from([b"HTTP/9.9", b"HTTP"]))
    request = method + b" " + path.encode() + b" " + version + b"\r\n"
    request += b"\r\n".join(headers) + b"\r\n\r\n" + body
    if shape == "pipeline":
        request = request * draw(st.integers(2, 50))
    return Case("RAW", path, None, request)
