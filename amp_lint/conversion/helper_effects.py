"""What the helpers a training step calls do to gradients: read or clip them, or differentiate with
`torch.autograd.grad(..., create_graph=True)` (a gradient penalty).

The analysis inlines a helper's protocol events where it is called, but not a helper with a loop of its own
(`for p in model.parameters(): p.grad.data.mul_(...)` is a loop). The conversion needs to know about those:
hand-written clipping in `clip_gradients(model, t)` reads gradients that a GradScaler leaves scaled (so
`scaler.unscale_` must come before the call), and a gradient penalty computed in a helper needs the same
hand-written pattern as the inline form. This query follows the calls of the file's own functions and methods
(`analysis.steps.callee_scope`), a few levels deep, and looks at their events and their `.grad` reads.

Helpers of other modules of the project count the same (`from utils import clip_gradients`,
`import utils; utils.clip_gradients(...)`, or one star-imported project module that defines the name): the cross-file summaries of the analysis
(`analysis.summaries.ProjectSummaries`) are built only for files that drive a GradScaler, and an fp32 file being
converted drives none, so this query resolves the callee through the project index itself
(`analysis.project.checked_file`, `qualified_in`, `ProjectIndex.resolve`), parses the module once per run
(a module with no word of gradient code and no import in its text is never parsed) and asks the same question of its
function. At most MAX_MODULES other modules per checked file; each read is recorded as a dependency of the
file's result (the result cache).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from amp_lint.analysis.builder import build_model
from amp_lint.analysis.calls import is_grad
from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.project import MAX_MODULE_BYTES, ProjectIndex, checked_file, qualified_in
from amp_lint.analysis.steps import callee_scope
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.walk import visit_read_only
from amp_lint.parse.cst_parse import parse_module

MAX_DEPTH = 4
MAX_MODULES = 6  # other modules one checked file's conversion may parse
MAX_PARSE_BYTES = min(MAX_MODULE_BYTES, 400_000)  # a helper module larger than this is not read (~0.5 s a parse)
# A module whose text has none of these cannot read, clip or differentiate gradients: never parsed.
_MAY_TOUCH_GRADIENTS = re.compile(rb"\.grad\b|clip_grad|autograd")
_IMPORTS = re.compile(rb"^\s*(?:from|import)\s", re.M)
# Parsed helper modules of the run: (path, digest) -> their HelperEffects (None: unreadable or not worth it).
_FOREIGN: Dict[Tuple[str, str], Optional["HelperEffects"]] = {}
_MAX_FOREIGN = 256


@dataclass(frozen=True)
class HelperEffect:
    reads_gradients: Optional[str] = None  # the code that reads or clips `.grad` in the helper (or its helpers)
    gradient_penalty: Optional[str] = None  # the `torch.autograd.grad(..., create_graph=True)` it runs
    where: str = ""  # the helper that holds it


class HelperEffects:
    """Memoised per file: what each of its functions does to gradients, through the functions it calls (in
    this file, or in other modules of the project when the file is checked with one)."""

    def __init__(self, model: FileModel, path: Optional[str] = None, index: Optional[ProjectIndex] = None) -> None:
        self.model = model
        self._memo: Dict[int, HelperEffect] = {}
        if path is None and index is None:
            found = checked_file()
            if found is not None:
                index, path = found
        self.path = path
        self.index = index
        self._modules_read: Set[str] = set()

    def of_call(self, event: Event) -> HelperEffect:
        """The effect of the helper a CALL event calls (nothing when it is not a function of the project)."""
        callee = callee_scope(self.model, event)
        if callee is not None:
            return self.of_scope(callee, set())
        return self.of_target(event.target or "", set())

    def of_node(self, call: cst.Call) -> HelperEffect:
        """The effect of a call the analysis records no event for: `utils.clip_gradients(model)` through a
        module import (a dotted call of an fp32 file is not followed by the analysis)."""
        target = dotted_name(call.func)
        if target is None or "." not in target or target.startswith("self."):
            return HelperEffect()
        return self.of_target(target, set())

    def of_target(self, target: str, active: Set[int]) -> HelperEffect:
        """The effect of the project function that the dotted name `target`, as this file imports it, calls."""
        found = self._foreign_function(target)
        if found is None:
            return HelperEffect()
        effects, scope = found
        effect = effects.of_scope(scope, active)
        return effect

    def _foreign_function(self, target: str) -> Optional[Tuple["HelperEffects", Scope]]:
        if not target or self.index is None or self.path is None or target.startswith("self."):
            return None
        try:
            info = self.index.add_file(Path(self.path))
            qualified = qualified_in(info, target)
            resolved = self.index.resolve(qualified) if qualified is not None else None
            if qualified is None and "." not in target and not info.defines(target):
                # `from utils import *`: the one star-imported project module that defines the name
                found = [r for r in (self.index.resolve(f"{star}.{target}") for star in info.star_imports) if r is not None]
                resolved = found[0] if len({(os.path.abspath(r[0].path), r[1]) for r in found}) == 1 else None
            if resolved is None:
                return None
            module_info, name = resolved
            if name not in module_info.functions or os.path.abspath(module_info.path) == os.path.abspath(self.path):
                return None
            effects = self._load(module_info.path, module_info.digest)
        except (RecursionError, MemoryError):
            raise
        except Exception:  # an unreadable corner of another module never costs this file its conversion
            return None
        if effects is None:
            return None
        scopes = [s for s in effects.model.scopes if s.is_function and s.class_name is None and s.parent is not None
                  and not s.parent.is_function and s.node.name.value == name]  # fmt: skip
        return (effects, scopes[0]) if len(scopes) == 1 else None

    def _load(self, path: str, digest: str) -> Optional["HelperEffects"]:
        key = (os.path.abspath(path), digest)
        assert self.index is not None
        self.index.note_read(key[0])
        if key in _FOREIGN:
            return _FOREIGN[key]
        if key[0] not in self._modules_read and len(self._modules_read) >= MAX_MODULES:
            return None
        self._modules_read.add(key[0])
        effects: Optional[HelperEffects] = None
        try:
            if os.path.getsize(key[0]) <= MAX_PARSE_BYTES:
                with open(key[0], "rb") as handle:
                    data = handle.read()
                # Parsed unless it can neither touch gradients itself nor call another module that does.
                if _MAY_TOUCH_GRADIENTS.search(data) or _IMPORTS.search(data):
                    code = data.decode("utf-8-sig")
                    effects = HelperEffects(build_model(parse_module(code)), key[0], self.index)
        except (OSError, UnicodeDecodeError, cst.ParserSyntaxError, cst.CSTValidationError, RecursionError):
            effects = None
        if len(_FOREIGN) >= _MAX_FOREIGN:
            _FOREIGN.clear()
        _FOREIGN[key] = effects
        return effects

    def of_scope(self, scope: Scope, active: Set[int]) -> HelperEffect:
        key = id(scope.node)
        if key in self._memo:
            return self._memo[key]
        if key in active or len(active) >= MAX_DEPTH:
            return HelperEffect()
        active = active | {key}
        reads: Optional[str] = None
        penalty: Optional[str] = None
        name = scope.name or ""
        for event in scope.events:
            if event.kind in (EventKind.CLIP, EventKind.GRAD_READ) and reads is None:
                reads = code_of(event.call)
            elif event.kind is EventKind.AUTOGRAD_GRAD and penalty is None and creates_graph(event.call):
                penalty = code_of(event.call)
            elif event.kind is EventKind.CALL:
                callee = callee_scope(self.model, event)
                if callee is scope:
                    continue
                inner = self.of_scope(callee, active) if callee is not None else self.of_target(event.target or "", active)
                if reads is None and inner.reads_gradients:
                    reads, name = inner.reads_gradients, inner.where
                if penalty is None and inner.gradient_penalty:
                    penalty, name = inner.gradient_penalty, inner.where
        if reads is None:
            reads = _grad_read(scope)
        effect = HelperEffect(_short(reads), _short(penalty), name)
        self._memo[key] = effect
        return effect


def dotted_calls(root: cst.CSTNode) -> List[cst.Call]:
    """The calls `module.function(...)` in `root` (not in functions nested in it): the calls into other modules
    that the analysis records no event for in an fp32 file. `HelperEffects.of_node` answers for them (and
    nothing for a method call on an object, whose name resolves to no project module)."""
    found: List[cst.Call] = []

    class Calls(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is root

        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and isinstance(node.func.value, (cst.Name, cst.Attribute)):
                name = dotted_name(node.func)
                if name is not None and not name.startswith("self."):
                    found.append(node)

    visit_read_only(root, Calls())
    return found


def creates_graph(call: cst.Call) -> bool:
    value = next((a.value for a in call.args if a.keyword and a.keyword.value == "create_graph"), None)
    return value is not None and not (isinstance(value, cst.Name) and value.value == "False")


def _grad_read(scope: Scope) -> Optional[str]:
    """A read of some `x.grad` in the function's own body (not `torch.autograd`, not an assignment target)."""
    node = scope.node
    if not isinstance(node, cst.FunctionDef):
        return None
    found: List[str] = []

    class Reads(cst.CSTVisitor):
        def visit_FunctionDef(self, inner: cst.FunctionDef) -> bool:
            return inner is node

        def visit_AssignTarget(self, target: cst.AssignTarget) -> bool:
            return not isinstance(target.target, cst.Attribute)  # `p.grad = None` clears; it does not read

        def visit_Attribute(self, attribute: cst.Attribute) -> None:
            if is_grad(attribute) and not (dotted_name(attribute.value) or "").endswith("autograd"):
                found.append(code_of(attribute))

    visit_read_only(node, Reads())
    return found[0] if found else None


def _short(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
