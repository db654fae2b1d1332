"""What the helpers a training step calls do to gradients, for the conversion: read or clip them, or differentiate
with `torch.autograd.grad(..., create_graph=True)` (a gradient penalty).

The analysis inlines a helper's protocol events where it is called, but not a helper with a loop of its own
(`for p in model.parameters(): p.grad.data.mul_(...)` is a loop). The conversion needs to know about those:
hand-written clipping in `clip_gradients(model, t)` reads gradients that a GradScaler leaves scaled (so
`scaler.unscale_` must come before the call), and a gradient penalty computed in a helper needs the same
hand-written pattern as the inline form.

The answer is the analysis' own summary of a function's gradient effects (`analysis.gradient_effects`:
`effects_of_call`, transitive through the file's functions, methods and other project modules), asked while a
provider of the project's summaries follows the file (`analysis.summaries.ProjectSummaries.following`): an fp32
file drives no scaler, so the checker's provider does not follow it, and this one resolves its calls of other
modules' functions (`from utils import clip_gradients`, `utils.clip_gradients(...)`, a star import), each module
read a dependency of the file's result. Nothing is parsed here.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

import libcst as cst

from amp_lint.analysis import gradient_effects
from amp_lint.analysis.events import Event
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.gradient_effects import GradientEffects, creates_graph  # noqa: F401  (refusals use it)
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.project import ProjectIndex, checked_file
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.walk import visit_read_only

# The conversion's provider per project index (the run's); its models are memoised with this mode's answers.
_PROVIDERS: Dict[int, Tuple[ProjectIndex, object]] = {}


@dataclass(frozen=True)
class HelperEffect:
    reads_gradients: Optional[str] = None  # the code that reads or clips `.grad` in the helper (or its helpers)
    gradient_penalty: Optional[str] = None  # the `torch.autograd.grad(..., create_graph=True)` it runs
    where: str = ""  # the helper that holds it


class HelperEffects:
    """One file's questions about the helpers its training steps call (in this file, or in other modules of the
    project when the file is checked with one)."""

    def __init__(self, model: FileModel, path: Optional[str] = None, index: Optional[ProjectIndex] = None) -> None:
        self.model = model
        if path is None and index is None:
            found = checked_file()
            if found is not None:
                index, path = found
        self.path = path
        self.index = index

    def of_call(self, event: Event) -> HelperEffect:
        """The effect of the helper a CALL event calls (nothing when it is not a function of the project)."""
        with self._following():
            return _described(gradient_effects.effects_of_call(self.model, event))

    def of_node(self, call: cst.Call) -> HelperEffect:
        """The effect of a call the analysis records no event for: `utils.clip_gradients(model)` through a
        module import (a dotted call of an fp32 file is not followed by the analysis)."""
        target = dotted_name(call.func)
        if target is None or "." not in target or target.startswith("self."):
            return HelperEffect()
        with self._following():
            return _described(gradient_effects.effects_of_function_named(self.model, target))

    @contextlib.contextmanager
    def _following(self) -> Iterator[None]:
        if self.index is None or self.path is None:
            yield
            return
        from amp_lint.analysis.summaries import ProjectSummaries

        held = _PROVIDERS.get(id(self.index))
        if held is None or held[0] is not self.index:
            if len(_PROVIDERS) >= 8:
                _PROVIDERS.clear()
            held = _PROVIDERS[id(self.index)] = (self.index, ProjectSummaries(self.index))
        provider = held[1]
        with provider.following(self.path):  # type: ignore[attr-defined]
            yield


def _described(effects: GradientEffects) -> HelperEffect:
    reads: Optional[str] = None
    where = ""
    if effects.sites:
        reads, where = code_of(effects.sites[0].call), effects.sites[0].scope.name or ""
    elif effects.reads_grad_attribute:
        scope = effects.grad_attribute_scopes[0]
        reads, where = code_of(scope.node.name) + "(...)", scope.name or ""
    penalty: Optional[str] = None
    if effects.penalty_sites:
        penalty, where = code_of(effects.penalty_sites[0].call), effects.penalty_sites[0].scope.name or ""
    return HelperEffect(_short(reads), _short(penalty), where)


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


def _short(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
