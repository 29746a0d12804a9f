"""A griffe extension for the API page: each signature shows what a consumer passes.

Two rules, applied once griffe has built every signature (the dataclasses' included, which
is why mkdocs.yml names griffe's dataclasses extension before this one):

- A parameter whose name starts with one underscore is left out unless the docstring
  documents it. Undocumented ones are plumbing (the dataclass field
  `NemoLensConfig._span_group_cls`, set through `from_env(span_group_cls=...)`); documented
  ones are part of the call a consumer makes (`ray_dispatch_with_context(..., _carrier=)`).
- A default that names a constant shows the constant's literal value
  (`service_name: str = "nemo"`, not `_DEFAULT_SERVICE_NAME`). The value is followed through
  other constants and through a one-argument call that wraps a literal (lens's default
  service name is a `str` subclass around `"nemo"`); anything else keeps its name.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import griffe

_SHOWN_TYPES = (str, int, float, bool, type(None))
# How many constants a default may pass through before it keeps its name.
_MAX_HOPS = 4


class LensSignatures(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for function in _functions(pkg):
            function.parameters = griffe.Parameters(
                *(p for p in function.parameters if not _hidden(p.name, function))
            )
            for parameter in function.parameters:
                if isinstance(parameter.default, (griffe.ExprName, griffe.ExprAttribute)):
                    shown = _literal(parameter.default, pkg.modules_collection, _MAX_HOPS)
                    if shown is not None:
                        parameter.default = shown


def _hidden(name: str, function: griffe.Function) -> bool:
    """A private parameter that neither the function's nor its class's docstring lists."""
    if not name.startswith("_") or name.startswith("__"):
        return False
    owner = function.parent if function.name == "__init__" else function
    documented = [obj.docstring.value for obj in (function, owner) if obj and obj.docstring]
    entry = re.compile(rf"^\s*{re.escape(name)}\b[^:\n]*:", re.MULTILINE)
    return not any(entry.search(text) for text in documented)


def _functions(module: griffe.Module) -> list[griffe.Function]:
    """Every function and method defined in `module`, its submodules and their classes."""
    found: list[griffe.Function] = []
    pending: list[griffe.Object] = [module]
    while pending:
        obj = pending.pop()
        for member in obj.members.values():
            if member.is_alias:
                continue
            if isinstance(member, griffe.Function):
                found.append(member)
            elif isinstance(member, (griffe.Module, griffe.Class)):
                pending.append(member)
    return found


def _literal(value: object, objects: Any, hops: int) -> str | None:
    """`value` as a literal in double quotes (`"nemo"`, `0`), or None if it is none."""
    if isinstance(value, str):
        try:
            literal = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
        if not isinstance(literal, _SHOWN_TYPES):
            return None
        return json.dumps(literal) if isinstance(literal, str) else repr(literal)
    if hops == 0:
        return None
    if isinstance(value, (griffe.ExprName, griffe.ExprAttribute)):
        try:
            target = objects[value.canonical_path]
        except KeyError:
            return None
        return _literal(getattr(target, "value", None), objects, hops - 1)
    if isinstance(value, griffe.ExprCall) and len(value.arguments) == 1:
        return _literal(value.arguments[0], objects, hops - 1)
    return None
