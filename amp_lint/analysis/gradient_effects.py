"""What a project function does to the gradients: a summary per function, transitive through the calls
that can be resolved (issue 26, principle 3).

`effects_of(model, scope)` answers, for a function or method of the checked file, a `GradientEffects`:
whether it reads gradient values (a norm, a log, a clip: `GRAD_READ` and `CLIP` events), clips them,
zeroes them, backpropagates, steps an optimizer, and which scaler methods it drives; and whether a call
it makes could not be resolved (`unknown`: it may do any of these, so a rule stays silent on it).

A call is resolved (`callee_of`) when it is
- a function of this file by name, or a method of the same class (`self.m()`; `steps.callee_scope`);
- a method of an object this file's class builds in its own methods (`self.clipper = Clipper()` then
  `self.clipper.clip(model)`, `Clipper` a class of this file);
- an attribute that every assignment in the class binds to one known function (`self.clip_func =
  torch.nn.utils.clip_grad_norm_` on one branch, `clip_grad_value_` on the other: a clip either way; or
  a function of this file);
- a literal `getattr(self, "name")(...)` (the walk records it as `self.name(...)`);
- a function of another project module, through the run's project index (`summaries`), whose events
  are already the callee's with its helpers inlined.
A function passed in as a parameter is resolved where its caller's events are inlined (the parameter is
renamed to the caller's argument, a function of the file). Anything else is unknown.

`calls_reading_gradients(model, step)` lists a training step's calls of helpers that read gradients
and cannot unscale them (no scaler reached, no `unscale`/`get_scale` in them): AMP030 treats such a
call between a scaled backward and `unscale_` as it treats `clip_grad_norm_`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Tuple, Union

import libcst as cst

from amp_lint.analysis import names as torch_names
from amp_lint.analysis.calls import is_grad
from amp_lint.analysis.events import SCALER_KINDS, Event, EventKind
from amp_lint.analysis.file_model import FileModel, Scope, TrainingStep
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.project_hooks import ACTIVE
from amp_lint.analysis.steps import callee_scope
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.walk import visit_read_only

_MAX_DEPTH = 4
_ACCESSORS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "buffers", "named_buffers"})
_SCALER_METHODS = {
    EventKind.SCALER_SCALE: "scale",
    EventKind.SCALER_UNSCALE: "unscale_",
    EventKind.SCALER_STEP: "step",
    EventKind.SCALER_UPDATE: "update",
}


@dataclass(frozen=True)
class GradientEffects:
    """A function's effect on gradients, its callees' included."""

    reads: bool = False  # reads gradient values: a norm, a statistic, a log, a clip
    clips: bool = False  # clips them (`clip_grad_norm_` and friends)
    zeroes: bool = False  # zero_grad
    backward: bool = False  # a backward pass or autograd.grad
    steps: bool = False  # an optimizer step (direct or through a scaler)
    scaler: FrozenSet[str] = frozenset()  # the scaler methods it calls: scale, unscale_, step, update
    mentions_scale: bool = False  # `unscale`/`get_scale` written in it: it may unscale or rescale itself
    unknown: bool = False  # a call through `self` or a scaler that could not be resolved
    penalty: bool = False  # `torch.autograd.grad(..., create_graph=True)`: a gradient penalty
    reads_grad_attribute: bool = False  # reads some `x.grad` in its body, not only in a loop over parameters
    sites: Tuple[Event, ...] = field(default=(), compare=False)  # the reads and clips, where they are
    penalty_sites: Tuple[Event, ...] = field(default=(), compare=False)  # the penalties' autograd.grad calls
    grad_attribute_scopes: Tuple[Scope, ...] = field(default=(), compare=False)  # the functions reading `.grad`

    @property
    def reads_gradients(self) -> bool:
        return self.reads or self.clips

    @property
    def drives_scaler(self) -> bool:
        return bool(self.scaler)

    @property
    def reads_scaled_values(self) -> bool:
        """Reads gradient values and cannot unscale them (nor scale its threshold) on the way: the read sees
        whatever scale the gradients have at the call."""
        return self.reads_gradients and not self.scaler and not self.mentions_scale and not self.unknown

    def joined(self, other: "GradientEffects") -> "GradientEffects":
        return GradientEffects(
            reads=self.reads or other.reads,
            clips=self.clips or other.clips,
            zeroes=self.zeroes or other.zeroes,
            backward=self.backward or other.backward,
            steps=self.steps or other.steps,
            scaler=self.scaler | other.scaler,
            mentions_scale=self.mentions_scale or other.mentions_scale,
            unknown=self.unknown or other.unknown,
            penalty=self.penalty or other.penalty,
            reads_grad_attribute=self.reads_grad_attribute or other.reads_grad_attribute,
            sites=self.sites + other.sites,
            penalty_sites=self.penalty_sites + other.penalty_sites,
            grad_attribute_scopes=self.grad_attribute_scopes + other.grad_attribute_scopes,
        )


NONE = GradientEffects()
UNKNOWN = GradientEffects(unknown=True)
CLIPS = GradientEffects(reads=True, clips=True)

# A scope of this file, a leaf effect, another module's (model, scope), or its inlined events and whether
# its text mentions the scale.
Callee = Union[Scope, GradientEffects, Tuple[FileModel, Scope], Tuple[Tuple[Event, ...], bool]]


def effects_of(model: FileModel, scope: Scope) -> GradientEffects:
    """The gradient effects of the function `scope` of `model` (memoised per model)."""
    memo = _memo(model)
    return _effects(model, scope, memo, depth=0, active=frozenset())


def effects_of_call(model: FileModel, call: Event) -> GradientEffects:
    """The gradient effects of the function a CALL event calls; UNKNOWN when it cannot be resolved. A call
    inlined from another module's function (its scope is that module's) is resolved in that module."""
    model = _model_of(model, call.scope)
    if model is None:
        return UNKNOWN
    return _call_effects(model, call, _memo(model), depth=0, active=frozenset())


def effects_of_function_named(model: FileModel, target: str) -> GradientEffects:
    """The gradient effects of the function of another project module that the dotted name `target` (a call
    the model records no event for: `utils.clip_gradients(model)` in a file that drives no scaler) calls, while
    a provider follows the file (`summaries.ProjectSummaries.following`); NONE when it cannot be resolved."""
    if not ACTIVE or not ACTIVE[-1].following_functions:
        return NONE
    found = ACTIVE[-1].function_of(model, target)
    if found is None:
        return NONE
    return _effects(found[0], found[1], _memo(found[0]), depth=1, active=frozenset())


def creates_graph(call: cst.Call) -> bool:
    """`create_graph=` given and not literally False: the gradients are differentiated again."""
    value = next((a.value for a in call.args if a.keyword and a.keyword.value == "create_graph"), None)
    return value is not None and not (isinstance(value, cst.Name) and value.value == "False")


def _model_of(model: FileModel, scope: Scope) -> Optional[FileModel]:
    if any(s is scope for s in model.scopes):
        return model
    for provider in ACTIVE:
        for foreign in list(provider._modules.values()):
            if foreign is not None and foreign.model is not None and any(s is scope for s in foreign.model.scopes):
                return foreign.model
    return None


def calls_reading_gradients(model: FileModel, step: TrainingStep) -> List[Tuple[Event, GradientEffects]]:
    """The step's helper calls whose callee reads gradient values and cannot unscale them, and whose events
    the step does not already hold inlined (those are judged as the reads themselves)."""
    inlined = {id(e.via) for e in step.events if e.via is not None}
    found = []
    for event in step.events:
        if event.kind is not EventKind.CALL or id(event) in inlined:
            continue
        if "unscale" in (event.target or "") or any(_names_scale(arg.value) for arg in event.call.args):
            continue  # the scaler (or its scale) handed to the helper: it may unscale or rescale
        effects = effects_of_call(model, event)
        if effects.reads_scaled_values:
            found.append((event, effects))
    return found


def _names_scale(expr: cst.BaseExpression) -> bool:
    text = code_of(expr)
    return "scale" in text.lower()


# --- resolution ---
def callee_of(model: FileModel, call: Event) -> Optional[Callee]:
    """What a CALL event calls: a scope of this file, a known leaf effect, or another module's events."""
    target = call.target or ""
    scope = callee_scope(model, call)
    if scope is not None:
        return scope
    parts = target.split(".")
    class_name = call.scope.class_name
    if parts[0] == "self" and class_name is not None:
        if len(parts) == 2:
            bound = _attribute_function(model, class_name, parts[1], call.scope)
            if bound is not None:
                return bound
        if len(parts) == 3:
            held = _attribute_class(model, class_name, parts[1])
            if held is not None:
                methods = _methods_of(model, held, parts[2])
                if len(methods) == 1:
                    return methods[0]
    if len(parts) == 2 and parts[0] != "self":  # `net = Net()` in this function, then `net.clip_grad_norm_()`
        held = _local_class(model, call.scope, parts[0])
        if held is not None:
            methods = _methods_of(model, held, parts[1])
            if len(methods) == 1:
                return methods[0]
    foreign = _foreign(model, call)
    if foreign is not None:
        return foreign
    return None


def _attribute_sites(model: FileModel, class_name: str, attr: str):
    index = getattr(model, "_self_attribute_sites", None)
    if index is None:
        index = {}
        for site in model.assignment_sites:
            if site.target.startswith("self.") and site.target.count(".") == 1 and site.scope.class_name:
                index.setdefault((site.scope.class_name, site.target), []).append(site)
        try:
            object.__setattr__(model, "_self_attribute_sites", index)
        except AttributeError:
            pass
    return index.get((class_name, f"self.{attr}"), [])


def _attribute_function(model: FileModel, class_name: str, attr: str, scope: Scope) -> Optional[Callee]:
    """`self.attr` bound, by every assignment in the class, to a clip function (a clip) or to one function
    of this file (that function)."""
    sites = _attribute_sites(model, class_name, attr)
    if not sites:
        return None
    found: List[Callee] = []
    for site in sites:
        value = site.value
        qualified = site.scope.names.qualify(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
        if qualified in torch_names.CLIP_GRAD:
            found.append(CLIPS)
            continue
        if isinstance(value, cst.Name):
            scopes = [
                s
                for s in model.function_scopes_named(value.value)
                if s.node.name.value == value.value and s.class_name is None and s.parent is not None and not s.parent.is_function
            ]
            if len(scopes) == 1:
                found.append(scopes[0])
                continue
        return None  # anything else: unknown
    if all(f is CLIPS for f in found):
        return CLIPS
    if len({id(f) for f in found}) == 1:
        return found[0]
    return None


def _attribute_class(model: FileModel, class_name: str, attr: str) -> Optional[str]:
    """The class of this file that every assignment of `self.attr` in the class constructs."""
    sites = _attribute_sites(model, class_name, attr)
    held = set()
    for site in sites:
        value = site.value
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name) or value.func.value not in model.classes:
            return None
        held.add(value.func.value)
    return held.pop() if len(held) == 1 else None


def _local_class(model: FileModel, scope: Scope, name: str) -> Optional[str]:
    """The class of this file that every assignment of the local `name` in `scope` constructs."""
    held = set()
    for site in model.assignments_in(scope, name):
        value = site.value
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name) or value.func.value not in model.classes:
            return None
        held.add(value.func.value)
    return held.pop() if len(held) == 1 else None


def _methods_of(model: FileModel, class_name: str, method: str) -> List[Scope]:
    return [
        s
        for s in model.function_scopes_named(method)
        if s.node.name.value == method and s.class_name == class_name and s.parent is not None and not s.parent.is_function
    ]


def _foreign(model: FileModel, call: Event):
    """Another project module's function, through the run's summary provider (its helpers inlined)."""
    if not ACTIVE:
        return None
    if ACTIVE[-1].following_functions:  # a file that drives no scaler: its function, in its model
        return ACTIVE[-1].function_of(model, call.target or "")
    try:
        summary = ACTIVE[-1].provide(model, call)
    except (RecursionError, MemoryError):
        raise
    except Exception:
        return None
    if summary is None:
        return None
    for foreign in list(ACTIVE[-1]._modules.values()):
        if foreign is not None and foreign.model is not None and any(s is summary.scope for s in foreign.model.scopes):
            return foreign.model, summary.scope  # summarised in its own module, where its calls resolve
    text = code_of(summary.scope.node)
    return tuple(summary.events), "unscale" in text or "get_scale" in text


# --- effects ---
def _memo(model: FileModel) -> Dict[int, GradientEffects]:
    following = bool(ACTIVE) and ACTIVE[-1].following_functions
    attribute = "_gradient_effects_followed" if following else "_gradient_effects"  # answers of that mode apart
    memo = getattr(model, attribute, None)
    if memo is None:
        memo = {}
        try:
            object.__setattr__(model, attribute, memo)
        except AttributeError:
            pass
    return memo


def _effects(model: FileModel, scope: Scope, memo, depth: int, active: FrozenSet[int]) -> GradientEffects:
    key = id(scope)
    if key in memo:
        return memo[key]
    if key in active or depth > _MAX_DEPTH:
        return UNKNOWN  # recursion, or too deep to follow
    text = code_of(scope.node) if isinstance(scope.node, cst.FunctionDef) else ""
    reads_grad = ".grad" in text and _reads_grad_attribute(scope.node)
    total = GradientEffects(mentions_scale="unscale" in text or "get_scale" in text, reads_grad_attribute=reads_grad,
                            grad_attribute_scopes=(scope,) if reads_grad else ())  # fmt: skip
    for event in scope.events:
        total = total.joined(_event_effects(model, event, memo, depth, active | {key}))
    memo[key] = total
    return total


def _event_effects(model: FileModel, event: Event, memo, depth: int, active: FrozenSet[int]) -> GradientEffects:
    kind = event.kind
    if kind is EventKind.GRAD_READ:
        return GradientEffects(reads=True, sites=(event,))
    if kind is EventKind.CLIP:
        return GradientEffects(reads=True, clips=True, sites=(event,))
    if kind is EventKind.ZERO_GRAD:
        return GradientEffects(zeroes=True)
    if kind in (EventKind.BACKWARD, EventKind.AUTOGRAD_GRAD):
        scaler = frozenset({"scale"}) if event.scaled_by else frozenset()
        if kind is EventKind.AUTOGRAD_GRAD and creates_graph(event.call):
            return GradientEffects(backward=True, scaler=scaler, penalty=True, penalty_sites=(event,))
        return GradientEffects(backward=True, scaler=scaler)
    if kind is EventKind.OPTIMIZER_STEP:
        return GradientEffects(steps=True)
    if kind in SCALER_KINDS:
        return GradientEffects(scaler=frozenset({_SCALER_METHODS[kind]}), steps=kind is EventKind.SCALER_STEP)
    if kind is EventKind.CALL:
        if "unscale" in (event.target or ""):
            return GradientEffects(scaler=frozenset({"unscale_"}))
        return _call_effects(model, event, memo, depth, active)
    return NONE


def _call_effects(model: FileModel, call: Event, memo, depth: int, active: FrozenSet[int]) -> GradientEffects:
    callee = callee_of(model, call)
    if callee is None and (call.target or "").rpartition(".")[2] in _ACCESSORS:
        return NONE  # `self.parameters()`: nn.Module's accessors read no gradient values and drive no scaler
    if callee is None:
        # `len(x)`, `print(...)`: a plain call of something that is not the project's cannot reach a scaler
        # unless it is handed one; a call through `self` or a dotted name may do anything.
        # A function handed in as a parameter may be anything too.
        target = call.target or ""
        if "." in target or "scal" in code_of(call.call).lower() or any(target in s.params for s in call.scope.chain()):
            return UNKNOWN
        return NONE
    if isinstance(callee, GradientEffects):
        return GradientEffects(
            reads=callee.reads, clips=callee.clips, unknown=callee.unknown, sites=(call,) if callee.reads_gradients else ()
        )
    if isinstance(callee, Scope):
        return _effects(model, callee, memo, depth + 1, active)
    if isinstance(callee[0], FileModel):  # another module's function, in that module's model
        return _effects(callee[0], callee[1], _memo(callee[0]), depth + 1, active)
    events, mentions_scale = callee
    total = GradientEffects(mentions_scale=mentions_scale)
    followed = {id(e.via) for e in events if e.via is not None}
    for event in events:  # another module's events, helpers already inlined
        if event.kind is EventKind.CALL and "unscale" not in (event.target or ""):
            if id(event) not in followed and "." in (event.target or ""):
                total = total.joined(UNKNOWN)  # a call its own module could not follow either
            continue  # followed: its events are in the list
        total = total.joined(_event_effects(model, event, memo, depth + 1, active))
    return total


def _reads_grad_attribute(node: cst.CSTNode) -> bool:
    """Does the function read some `x.grad` in its own body (not `torch.autograd`, not an assignment target:
    `p.grad = None` clears, it does not read)? Wherever it sits: `for group in optimizer.param_groups:` loops
    are not parameter loops, so their reads are no GRAD_READ events."""
    found: List[bool] = []

    class Reads(cst.CSTVisitor):
        def visit_FunctionDef(self, inner: cst.FunctionDef) -> bool:
            return inner is node

        def visit_AssignTarget(self, target: cst.AssignTarget) -> bool:
            return not isinstance(target.target, cst.Attribute)

        def visit_Attribute(self, attribute: cst.Attribute) -> None:
            if is_grad(attribute) and not (dotted_name(attribute.value) or "").endswith("autograd"):
                found.append(True)

    if isinstance(node, cst.FunctionDef):
        visit_read_only(node, Reads())
    return bool(found)


def class_builds_scaler(model: FileModel, key: Optional[str], scope: Scope) -> bool:
    """`self.scaler` bound, in the class of `scope`, only to GradScaler constructions (one may be enabled):
    the class owns its scaler, no caller hands one in."""
    if key is None or not key.startswith("self.") or scope.class_name is None:
        return False
    bindings = model.scaler_bindings(key, scope)
    built = all(b.call is not None or b.factory is not None for b in bindings)  # a project factory builds it too
    return bool(bindings) and built and any(b.is_enabled for b in bindings)


# --- which optimizer holds which module's parameters ---
def optimizer_holds_parameters_of(model: FileModel, optimizer: str, module: str, scope: Scope) -> bool:
    """Is the optimizer `optimizer` (a key the step steps) built, in this file, from parameters of `module`
    (`AdamW(groups)` with `groups` built from `module.named_parameters()`, through names, list mutations and
    loops over the parameters)? Then `module.zero_grad()` clears gradients the optimizer's step needs.
    Only the assignments of the optimizer in `scope`'s function (or, for `self.x`, its class) count."""
    import re

    sites = [
        site
        for site in model.assignment_sites
        if site.target == optimizer
        and (site.scope is scope or (optimizer.startswith("self.") and site.scope.class_name == scope.class_name))
    ]
    pattern = re.compile(rf"(?<![\w.]){re.escape(module)}\.(parameters|named_parameters)\(")
    for site in sites:
        value = site.value
        if not isinstance(value, cst.Call) or not value.args:
            continue
        argument = code_of(value.args[0].value)
        if pattern.search(argument):
            return True
        derived = _derived_names(site.scope.node, pattern) | _names_from_helpers(model, site.scope.node, module)
        if any(re.search(rf"(?<![\w.]){re.escape(name)}\b", argument) for name in derived):
            return True
    return False


def _names_from_helpers(model: FileModel, function: cst.CSTNode, module: str) -> FrozenSet[str]:
    """Names of `function` bound to what a function of this file returns when it is given `module`
    (`groups = self.get_optimizer_parameters(model, args)`), where that function builds its return value from
    the parameters of the module it gets (`<param>.named_parameters()`, through its own names): the
    optimizer is built from the module's parameters one call away (issue 26, principle 4)."""
    import re

    found: set = set()
    if not isinstance(function, cst.FunctionDef):
        return frozenset()
    for node in _assignments(function):
        call = node.value
        if not isinstance(call, cst.Call):
            continue
        func = call.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
        positions = [i for i, a in enumerate(call.args) if a.keyword is None and not a.star and code_of(a.value) == module]
        keywords = [a.keyword.value for a in call.args if a.keyword is not None and code_of(a.value) == module]
        if name is None or not (positions or keywords):
            continue
        method = isinstance(func, cst.Attribute)
        for callee in model.functions_named(name):
            params = [p.name.value for p in list(callee.params.posonly_params) + list(callee.params.params)]
            if method and params[:1] == ["self"]:
                params = params[1:]
            chosen = [params[i] for i in positions if i < len(params)] + [k for k in keywords if k in params]
            for param in chosen:
                inner = re.compile(rf"(?<![\w.]){re.escape(param)}\.(parameters|named_parameters)\(")
                derived = _derived_names(callee, inner)
                returned = [code_of(r.value) for r in _returns(callee) if r.value is not None]
                if returned and any(
                    inner.search(text) or any(re.search(rf"(?<![\w.]){re.escape(d)}\b", text) for d in derived) for text in returned
                ):
                    for target in node.targets:
                        found.update(_target_names(target.target))
    return frozenset(found)


def _assignments(function: cst.FunctionDef) -> List[cst.Assign]:
    return _own_statements(function, cst.Assign)


def _returns(function: cst.FunctionDef) -> List[cst.Return]:
    return _own_statements(function, cst.Return)


def _own_statements(function: cst.FunctionDef, kind: type) -> list:
    """The statements of type `kind` in `function`'s own body, not those of functions defined inside it."""
    found: list = []

    class Collector(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> Optional[bool]:
            return node is function

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kind):
                found.append(node)
            return super().on_visit(node)

    function.visit(Collector())
    return found


def _derived_names(function: cst.CSTNode, pattern) -> FrozenSet[str]:
    """The plain names of `function` whose values are built from what `pattern` matches, through
    assignments, `x.append/extend/insert(...)`, `x[k] = ...`, `x += ...` and `for` targets (to a fixpoint)."""
    import re

    facts: List[Tuple[str, str]] = []  # (name bound or grown, text of what it is built from)

    class Collector(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> Optional[bool]:
            return node is function

        def visit_ClassDef(self, node: cst.ClassDef) -> Optional[bool]:
            return False

        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                for name in _target_names(target.target):
                    facts.append((name, code_of(node.value)))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            for name in _target_names(node.target):
                facts.append((name, code_of(node.value)))

        def visit_For(self, node: cst.For) -> None:
            for name in _target_names(node.target):
                facts.append((name, code_of(node.iter)))

        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("append", "extend", "insert") and isinstance(func.value, cst.Name):
                facts.append((func.value.value, " ".join(code_of(a.value) for a in node.args)))

    if not isinstance(function, cst.FunctionDef):
        return frozenset()
    function.visit(Collector())
    derived: set = set()
    for _ in range(6):
        before = len(derived)
        for name, text in facts:
            if name in derived:
                continue
            if pattern.search(text) or any(re.search(rf"(?<![\w.]){re.escape(d)}\b", text) for d in derived):
                derived.add(name)
        if len(derived) == before:
            break
    return frozenset(derived)


def _target_names(target: cst.BaseExpression) -> List[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
        return [target.value.value]  # `group["params"] = ...` grows `group`
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _target_names(e.value)]
    return []
