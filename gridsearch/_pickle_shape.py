"""The shape of what a pickle builds, seen without building it (``pickle_shape``): its
kind, a dictionary's text keys, how deeply it nests, walked opcode by opcode as
``gridsearch._pickles`` walks a pickle for what it would import or call."""

from __future__ import annotations

import pickletools
from dataclasses import dataclass
from typing import Any, cast

from gridsearch._pickles import STRINGS, TUPLES, Text, generic_op, pop_mark

__all__ = ["Shape", "pickle_shape"]


@dataclass(frozen=True)
class Shape:
    """What a pickle builds, seen without building it: the kind of its object (``dict``,
    ``list``, ``tuple``, ``set``, ``object``: what a call or a class rebuilt, ``value``:
    a number, a string, ...), the text keys of a dictionary, and how deeply its
    containers and objects nest (a value alone: 0)."""

    kind: str
    keys: frozenset[str]
    depth: int


class _Node:
    __slots__ = ("depth", "keys", "kind")

    def __init__(self, kind: str, depth: int = 0) -> None:
        self.kind, self.depth, self.keys = kind, depth, set[str]()

    def holds(self, *items: Any) -> None:
        for item in items:
            if isinstance(item, _Node):
                self.depth = max(self.depth, item.depth + 1)
            else:
                self.depth = max(self.depth, 1)


_EMPTY = {"EMPTY_DICT": "dict", "EMPTY_LIST": "list", "EMPTY_SET": "set", "EMPTY_TUPLE": "tuple"}
_MARKED = {"DICT": "dict", "LIST": "list", "TUPLE": "tuple", "FROZENSET": "set"}
_CALLS = {"REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ", "INST"}


def pickle_shape(data: bytes) -> Shape | None:
    """The ``Shape`` of what the pickle ``data`` builds, from its opcodes (nothing is
    built, imported or called); None for a stream that is not a whole pickle."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    try:
        for opcode, arg, _ in pickletools.genops(data):
            name = opcode.name
            if name == "STOP":
                top = stack[-1] if stack else None
                if not isinstance(top, _Node):
                    return Shape("value", frozenset(), 0)
                return Shape(top.kind, frozenset(top.keys), top.depth)
            if name == "MARK":
                marks.append(len(stack))
            elif name in _EMPTY:
                stack.append(_Node(_EMPTY[name], 1))
            elif name in _MARKED:
                node = _Node(_MARKED[name], 1)
                items = pop_mark(stack, marks)
                node.holds(*items)
                if name == "DICT":
                    node.keys.update(k.value for k in items[::2] if isinstance(k, Text))
                stack.append(node)
            elif name in TUPLES:
                count = TUPLES[name]
                node = _Node("tuple", 1)
                node.holds(*stack[-count:])
                del stack[-count:]
                stack.append(node)
            elif name == "APPEND":
                item = stack.pop()
                _holding(stack).holds(item)
            elif name in ("APPENDS", "ADDITEMS"):
                _holding(stack, marks[-1] - 1).holds(*pop_mark(stack, marks))
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                _set_items(_holding(stack), [key, value])
            elif name == "SETITEMS":
                items = pop_mark(stack, marks)
                _set_items(_holding(stack), items)
            elif name == "BUILD":
                _holding(stack, len(stack) - 2).holds(stack.pop())
            elif name in _CALLS:
                node = _Node("object", 1)
                if name == "OBJ" or name == "INST":
                    node.holds(*pop_mark(stack, marks))
                else:
                    node.holds(*(stack.pop() for _ in range(3 if name == "NEWOBJ_EX" else 2)))
                stack.append(node)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[len(memo) if name == "MEMOIZE" else cast(int, arg)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo.get(cast(int, arg)))
            elif name in STRINGS:
                stack.append(Text(str(arg)))
            else:
                generic_op(opcode, stack, marks)
    except Exception:  # genops and an odd stream raise many kinds: not a whole pickle
        return None
    return None


def _holding(stack: list[Any], index: int = -1) -> _Node:
    """The container an item goes into (a node for anything that is not one)."""
    found = stack[index] if stack else None
    if isinstance(found, _Node):
        return found
    node = _Node("value")
    if stack:
        stack[index] = node
    return node


def _set_items(target: _Node, items: list[Any]) -> None:
    target.holds(*items)
    if target.kind == "dict":
        target.keys.update(k.value for k in items[::2] if isinstance(k, Text))
