"""A pickle is a program: loading one imports and calls whatever it names. A runs
directory may come from elsewhere (a copy, a shared disk), so every pickle a search reads
back from it is walked here opcode by opcode (``pickletools``, which runs nothing) and
refused when it would import or call anything outside what this package's, Tune's and
Optuna's state legitimately holds: ``pickle_problem(data, policy)`` says what, or None.

A ``Policy`` is an allowlist of three kinds of names:

- ``calls``: what a state file may call (``REDUCE``, ``OBJ``, ``INST``): containers,
  numpy's and torch's rebuilders, ``pathlib`` and ``datetime``; an enum class of the
  libraries in ``classes_under`` (a call of an enum looks its member up) is one too;
- ``references``: what it may name without calling (functions kept as values: a space's
  define-by-run function, ``time.monotonic`` as a clock, numpy's array type);
- ``classes_under``: packages whose classes it may rebuild from their saved state
  (``NEWOBJ``: ``cls.__new__(cls)`` and the saved attributes, never ``__init__``;
  pickle itself refuses a ``NEWOBJ`` of anything that is not a class).

Anything else (``os.system``, ``builtins.eval``, ``subprocess.Popen``, an import of a
module, a function or class rebuilt from pickled code as ``cloudpickle`` writes for
code that lives in ``__main__``, a call of what another call returned, the state of a
global set in place) is a problem, named. Pickles inside a pickle or a JSON document
(Tune hex-encodes some, and restores them in ``__setstate__``) are walked too.

Why not a library: picklescan flags a list of known-dangerous globals (a denylist:
anything it does not list passes), and fickling's safety check flags every import
outside the standard library, which Tune's, Optuna's and our own state are made of.
What is needed is this allowlist, checked by a walk of 200 lines.

The policies of a search's state and of torch's files are ``gridsearch._pickle_policies``;
the shape of what a pickle builds, seen the same way, ``gridsearch._pickle_shape``.
"""

from __future__ import annotations

import binascii
import enum
import importlib
import json
import pickletools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

__all__ = [
    "STRINGS",
    "TUPLES",
    "Policy",
    "Text",
    "embedded_pickles",
    "generic_op",
    "json_problem",
    "pickle_problem",
    "pop_mark",
]

_MAX_DEPTH = 4  # pickles inside pickles, followed this deep
_PICKLE_START = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_OLD_STRINGS = {"STRING", "BINSTRING", "SHORT_BINSTRING"}
_BYTES = {"SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BYTEARRAY8"}
TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_CLOUDPICKLE = ("ray.cloudpickle.cloudpickle.", "cloudpickle.cloudpickle.")
_PYTHON2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}  # protocol 2's names
_HINTS = {  # what cloudpickle's helpers would do, said with their names
    "_make_function": " (a function rebuilt from pickled code)",
    "_make_skeleton_class": " (a class rebuilt from pickled code)",
    "_make_skeleton_enum": " (a class rebuilt from pickled code)",
    "subimport": " (an import of a module)",
}


@dataclass(frozen=True)
class Policy:
    """What a kind of pickle may import and call (see the module docstring)."""

    calls: frozenset[str]
    references: frozenset[str]
    classes_under: tuple[str, ...] = ()  # "optuna." : any class under it, rebuilt
    references_under: tuple[str, ...] = ()  # "gridsearch.spaces.": any name, not called
    persistent_ids: bool = False  # torch's storages (its files hold tensors by id)
    builtin_types: frozenset[str] = frozenset()  # cloudpickle's _builtin_type("MethodType")

    def may_rebuild(self, name: str) -> bool:
        return name in self.calls or name.startswith(self.classes_under)

    def may_name(self, name: str) -> bool:
        return (
            name in self.calls
            or name in self.references
            or name.startswith(self.references_under)
            or self.may_rebuild(name)
        )


# -- what the values on the walked stack are --------------------------------------------


@dataclass(frozen=True)
class Text:
    value: str


@dataclass(frozen=True)
class _Global:
    name: str


@dataclass(frozen=True)
class _Made:
    """An object a call or a rebuild made (``by``: what made it)."""

    by: str


@dataclass(frozen=True)
class _BuiltinType:
    name: str


@dataclass(frozen=True)
class _Tuple:
    items: tuple[Any, ...]


class _Refused(Exception):
    """What the pickle would do that the policy does not allow (the message)."""


def pickle_problem(data: bytes, policy: Policy, _depth: int = 0) -> str | None:
    """What the pickle ``data`` would import or call that ``policy`` does not allow (one
    phrase: "call os.system"), or None. A stream that is not a whole pickle is left to
    the damage checks (``gridsearch._damage``): None here."""
    try:
        for nested in _walk(data, policy):
            if _depth < _MAX_DEPTH and (problem := pickle_problem(nested, policy, _depth + 1)):
                return f"{problem} (in a pickle inside it)"
    except _Refused as refused:
        return str(refused)
    except Exception:  # genops raises many kinds on a stream that is not a pickle
        return None
    return None


def json_problem(text: bytes | str, policy: Policy) -> str | None:
    """What the pickles a JSON document carries (Tune's experiment state: hex strings of
    cloudpickled values, also inside JSON strings inside it) would import or call that
    ``policy`` does not allow, or None (also for a document that is not JSON)."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    for data in embedded_pickles(document):
        if problem := pickle_problem(data, policy):
            return problem
    return None


def embedded_pickles(value: Any, _depth: int = 0) -> Iterator[bytes]:
    """The pickles inside a decoded JSON ``value``: hex strings that decode to one, and
    those inside strings that are JSON documents themselves (Tune nests them)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from embedded_pickles(item, _depth)
    elif isinstance(value, list):
        for item in value:
            yield from embedded_pickles(item, _depth)
    elif isinstance(value, str):
        if value.startswith("80") and len(value) % 2 == 0:
            yield from _hex_pickle(value)
        elif _depth < _MAX_DEPTH and value.lstrip()[:1] in ("{", "["):
            try:
                inner = json.loads(value)
            except (ValueError, RecursionError):
                return
            yield from embedded_pickles(inner, _depth + 1)


def _walk(data: bytes, policy: Policy) -> Iterator[bytes]:
    """Walk ``data``'s opcodes with a stack of what each value is; raise ``_Refused``
    at the first thing ``policy`` does not allow; yield the pickles found inside it."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    for opcode, raw, _ in pickletools.genops(data):
        name, arg = opcode.name, cast(Any, raw)
        if name in STRINGS or name in _OLD_STRINGS:
            text = arg if isinstance(arg, str) else arg.decode("latin-1")
            stack.append(Text(text))
            if text.startswith("80") and len(text) % 2 == 0:
                yield from _hex_pickle(text)
            continue
        if name in _BYTES:
            if bytes(arg).startswith(_PICKLE_START):
                yield bytes(arg)
            stack.append(None)
            continue
        if name == "MARK":
            marks.append(len(stack))
            continue
        if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
            continue
        if name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo.get(arg))
            continue
        if name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            module = _PYTHON2_MODULES.get(module, module)  # as pickle's fix_imports reads it
            named = _imported(f"{module}.{attr}", policy)
            if name == "INST":
                stack.append(_call(named, _Tuple(tuple(pop_mark(stack, marks))), policy))
            else:
                stack.append(named)
            continue
        if name == "STACK_GLOBAL":
            attr, module = stack.pop(), stack.pop()
            if not (isinstance(module, Text) and isinstance(attr, Text)):
                raise _Refused("import a global whose name it computes")
            stack.append(_imported(f"{module.value}.{attr.value}", policy))
            continue
        if name in TUPLES:
            count = TUPLES[name]
            items = tuple(stack[-count:])
            del stack[-count:]
            stack.append(_Tuple(items))
            continue
        if name == "TUPLE":
            stack.append(_Tuple(tuple(pop_mark(stack, marks))))
            continue
        if name == "EMPTY_TUPLE":
            stack.append(_Tuple(()))
            continue
        if name == "REDUCE":
            args = stack.pop()
            stack.append(_call(stack.pop(), args, policy))
            continue
        if name in ("NEWOBJ", "NEWOBJ_EX"):
            if name == "NEWOBJ_EX":
                stack.pop()  # keyword arguments
            stack.pop()  # arguments
            stack.append(_rebuilt(stack.pop(), policy))
            continue
        if name == "OBJ":
            called = pop_mark(stack, marks)
            if not called:
                raise _Refused("call nothing (OBJ without a class)")
            stack.append(_call(called[0], _Tuple(tuple(called[1:])), policy))
            continue
        if name == "BUILD":
            stack.pop()  # the state
            target = stack[-1] if stack else None
            if isinstance(target, (_Global, _BuiltinType)):
                raise _Refused(f"set attributes of {_describe(target)} itself")
            continue
        if name in ("EXT1", "EXT2", "EXT4"):
            raise _Refused(f"call the copyreg extension {arg} (an import by number)")
        if name in ("PERSID", "BINPERSID"):
            if not policy.persistent_ids:
                raise _Refused("load a persistent id (not a plain state file)")
            if name == "BINPERSID":
                stack.pop()
            stack.append(None)
            continue
        generic_op(opcode, stack, marks)


def _hex_pickle(text: str) -> Iterator[bytes]:
    try:
        data = binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        return
    if data.startswith(_PICKLE_START):
        yield data


def generic_op(opcode: Any, stack: list[Any], marks: list[int]) -> None:
    """Any other opcode: what it takes off the stack and what it leaves (its own
    description in ``pickletools``)."""
    before = [entry.name for entry in opcode.stack_before]
    if "mark" in before:
        pop_mark(stack, marks)
        before = before[: before.index("mark")]
    if before:
        del stack[-len(before) :]
    stack.extend(None for _ in opcode.stack_after)


def pop_mark(stack: list[Any], marks: list[int]) -> list[Any]:
    start = marks.pop()
    items = stack[start:]
    del stack[start:]
    return items


def _imported(name: str, policy: Policy) -> _Global:
    if name.startswith(_CLOUDPICKLE) and name.endswith("._builtin_type") and policy.builtin_types:
        return _Global(name)
    if not policy.may_name(name):
        raise _Refused(f"import {name}{_HINTS.get(name.rpartition('.')[2], '')}")
    return _Global(name)


def _call(callable_: Any, args: Any, policy: Policy) -> Any:
    """What calling ``callable_`` with ``args`` leaves, when the policy allows it."""
    if isinstance(callable_, _Global):
        name = callable_.name
        if name.startswith(_CLOUDPICKLE) and name.endswith("._builtin_type"):
            return _builtin_type(args, policy)
        if name in policy.calls or (name.startswith(policy.classes_under) and _is_enum(name)):
            return _Made(name)
        raise _Refused(f"call {name}")
    if isinstance(callable_, _BuiltinType) and callable_.name == "MethodType":
        return _Made("types.MethodType")  # binds a function it names to an object
    raise _Refused(f"call {_describe(callable_)}")


def _builtin_type(args: Any, policy: Policy) -> _BuiltinType:
    """``cloudpickle._builtin_type(name)``: a type of the ``types`` module by its name; a
    code or function type would build code from the pickle."""
    items = args.items if isinstance(args, _Tuple) else ()
    if len(items) == 1 and isinstance(items[0], Text):
        if items[0].value in policy.builtin_types:
            return _BuiltinType(items[0].value)
        raise _Refused(f"build types.{items[0].value} (code from the pickle)")
    raise _Refused("build a type it computes")


def _rebuilt(cls: Any, policy: Policy) -> _Made:
    if isinstance(cls, _Global) and policy.may_rebuild(cls.name):
        return _Made(cls.name)
    raise _Refused(f"rebuild an object of {_describe(cls)}")


def _is_enum(name: str) -> bool:
    """Whether ``name`` (under a library the policy trusts) is an enum class: importing
    that library's module runs only the library's own code."""
    module, _, attr = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), attr)
    except Exception:  # not a module and attribute of the installed library
        return False
    return isinstance(found, enum.EnumMeta)


def _describe(value: Any) -> str:
    if isinstance(value, _Global):
        return value.name
    if isinstance(value, _BuiltinType):
        return f"types.{value.name}"
    if isinstance(value, _Made):
        return f"what a call of {value.by} returned"
    return "a value it computes"
