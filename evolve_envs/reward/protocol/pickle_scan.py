"""The pickle codec's opcode scan: what a pickle would build, refused before it is unpickled.

The scan follows the unpickler's stack with `pickletools`; see `check_opcodes`.

Example:
    >>> import pickle
    >>> check_opcodes(pickle.dumps([1, 2]), None)
    >>> huge_memo_index = b"\\x80\\x04]r" + (2**30).to_bytes(4, "little") + b"."
    >>> try:
    ...     check_opcodes(huge_memo_index, None)
    ... except UnsafePickleError as exc:
    ...     print(exc)
    pickle stores memo entry 1073741824 after only 0 entries
"""

from __future__ import annotations

import pickletools

from evolve_envs.reward.protocol.body_budget import BodyBudget, BodyBudgetError
from evolve_envs.reward.protocol.numpy_placeholders import BUILDABLE, NUMPY_GLOBALS
from evolve_envs.reward.protocol.pickle_types import UnsafePickleError

__all__ = ["check_opcodes"]


class _Slot:
    """What the scan knows of one value on the unpickler's stack: its kind (`"other"`, `"str"`,
    `"global"`, `"dtype"`, `"array"`, built ones `"dtype*"`/`"array*"`, `"mark"`) and, for a
    str or a global, its value."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: object = None) -> None:
        self.kind = kind
        self.value = value


_MARK = _Slot("mark")
_OTHER = _Slot("other")  # any value that takes no BUILD (shared: never changed)
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MEMO_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_STRINGS = frozenset({"UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})
_SPECIAL = (
    _MEMO_PUTS
    | _MEMO_GETS
    | _STRINGS
    | {
        "MEMOIZE",
        "GLOBAL",
        "STACK_GLOBAL",
        "REDUCE",
        "INST",
        "OBJ",
        "BUILD",
        "DUP",
        "POP",
    }
)
# Every other opcode's stack effect, from pickletools: (pops to a mark?, values popped (below
# the mark, if any), values pushed).
_EFFECTS: dict[str, tuple[bool, int, tuple[_Slot, ...]]] = {
    op.name: (
        pickletools.stackslice in op.stack_before,
        op.stack_before.index(pickletools.markobject)
        if pickletools.stackslice in op.stack_before
        else len(op.stack_before),
        tuple(_MARK if s is pickletools.markobject else _OTHER for s in op.stack_after),
    )
    for op in pickletools.opcodes
    if op.name not in _SPECIAL
}


def _result_of(callee: _Slot) -> _Slot:
    if callee.kind == "global":
        stand_in = NUMPY_GLOBALS.get(callee.value)
        if stand_in is not None and id(stand_in) in BUILDABLE:
            return _Slot(BUILDABLE[id(stand_in)])
    return _OTHER


def _describe_slot(slot: _Slot) -> str:
    if slot.kind == "global":
        return "the global " + ".".join(slot.value) if slot.value else "a global"
    if slot.kind in ("dtype*", "array*"):
        return f"a numpy {slot.kind[:-1]} whose state is already set"
    return "a value that takes no state (list, dict, str, number or numpy scalar)"


def _underflow() -> UnsafePickleError:
    return UnsafePickleError("malformed pickle: stack underflow")


def _pop_mark(stack: list[_Slot]) -> list[_Slot]:
    """The values above the topmost mark (the mark removed)."""
    for at in range(len(stack) - 1, -1, -1):
        if stack[at] is _MARK:
            above = stack[at + 1 :]
            del stack[at:]
            return above
    raise UnsafePickleError("malformed pickle: no mark on the stack")


def check_opcodes(data: bytes, budget: BodyBudget | None) -> None:
    """Refuse, before unpickling, what would build something live or allocate out of proportion.

    Follows the unpickler's stack: `BUILD` only once on a dtype or array placeholder, memo indices
    in sequence (the C unpickler sizes its memo array to them), lengths within the data, and with a
    `budget` at most `4 * max_nodes + 1024` opcodes.
    """
    max_ops = 4 * budget.max_nodes + 1024 if budget is not None else -1
    stack: list[_Slot] = []
    memo: dict[int, _Slot] = {}
    stored = 0
    effects = _EFFECTS
    try:
        for count, (op, arg, _) in enumerate(pickletools.genops(data)):
            if count == max_ops:
                raise BodyBudgetError(
                    f"pickle has more than {max_ops} opcodes (the body may hold at most "
                    f"{budget.max_nodes} values)",  # type: ignore[union-attr]
                    field=None,
                )
            name = op.name
            effect = effects.get(name)
            if effect is not None:  # the generic stack effect pickletools documents
                to_mark, pops, pushes = effect
                if to_mark:
                    _pop_mark(stack)
                for _ in range(pops):
                    if not stack or stack.pop() is _MARK:
                        raise _underflow()
                stack.extend(pushes)
                continue
            if name in _STRINGS:
                stack.append(_Slot("str", arg))
                continue
            if name == "POP":  # at a mark it pops the mark, as the unpickler does
                if not stack:
                    raise _underflow()
                stack.pop()
                continue
            if name in _MEMO_GETS:
                if arg not in memo:
                    raise UnsafePickleError(f"malformed pickle: memo entry {arg} is not stored")
                stack.append(memo[arg])
                continue
            if name == "GLOBAL":
                stack.append(_Slot("global", tuple(arg.split(" ", 1))))
                continue
            if name == "INST":
                _pop_mark(stack)
                stack.append(_result_of(_Slot("global", tuple(arg.split(" ", 1)))))
                continue
            if name == "OBJ":
                above = _pop_mark(stack)
                if not above:
                    raise _underflow()
                stack.append(_result_of(above[0]))
                continue
            # the rest need values above the innermost mark
            if not stack or stack[-1] is _MARK:
                raise _underflow()
            if name in _MEMO_PUTS:
                if arg > stored:
                    raise UnsafePickleError(
                        f"pickle stores memo entry {arg} after only {stored} entries"
                    )
                stored = max(stored, arg + 1)
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
                stored += 1
            elif name == "DUP":
                stack.append(stack[-1])
            else:  # STACK_GLOBAL, REDUCE, BUILD: two values in, one out
                second = stack.pop()
                if not stack or stack[-1] is _MARK:
                    raise _underflow()
                first = stack.pop()
                if name == "STACK_GLOBAL":
                    named = first.kind == "str" and second.kind == "str"
                    stack.append(_Slot("global", (first.value, second.value) if named else None))
                elif name == "REDUCE":
                    stack.append(_result_of(first))
                else:  # BUILD: `second` is the state, `first` the value that takes it
                    if first.kind not in ("dtype", "array"):
                        raise UnsafePickleError(
                            f"pickle sets the state of {_describe_slot(first)} (BUILD); only "
                            "a numpy dtype or array takes a state, once"
                        )
                    first.kind += "*"
                    stack.append(first)
    except (UnsafePickleError, BodyBudgetError):
        raise
    except Exception as exc:  # noqa: BLE001 - pickletools raises ValueError and friends
        raise UnsafePickleError(f"malformed pickle: {type(exc).__name__}: {exc}") from None
