"""Summaries of functions of other modules of the checked tree, applied where this file calls them.

The analysis of one file puts the events of its own helpers at their call sites (`function_summary.Summary`).
A call it cannot follow in the file (`clip_gradients(model)` imported from `pkg.utils`, `self.backward(...)`
inherited from a base class of another module) is *unknown* to it. This provider answers some of those:

- the callee's name resolves, through this file's imports and the `ProjectIndex`, to a top-level function
  of a project module, a method of a base class (in another module) of the calling method's class, a
  method of the class whose instance `__init__` stores in the attribute called on (`self.clipper =
  GradClipper(...)` then `self.clipper.clip(model)`), or of an instance built in the call (`instance_calls`);
- that module is small enough (MAX_MODULE_BYTES) and the file has not already read MAX_MODULES_PER_FILE
  others; it is parsed once per run (LibCST, cached by path and digest) and its model built;
- the callee is a function without a loop of its own (a training loop is not a step part, as for
  helpers of the same file).

Otherwise the call stays unknown (None). Nothing here runs unless a file's analysis reaches a call it
cannot follow, and only the project's own modules are ever read.

Findings on events of another file are placed by the checker at the call site in the checked file
(`foreign_place` tells it where the event really is).

The other way round, for AMP013 (a function that builds its own GradScaler and runs a training loop with it,
called once per epoch from another module, animl #298): `callers_in_project` finds the project's calls of a
function of the checked file. The finding is reported in the checked file, at the construction (the file
that holds the bug, the one a pre-commit run on it checks); the caller's module is read to prove the
epoch loop, and the finding names its file and line. The search is `amp_lint.analysis.callers`' (the same files
whatever the run was asked to check); `callers.caller_dependencies` lists those files for a result cache.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import libcst as cst

from amp_lint.analysis import project_factories, scaler_classes
from amp_lint.analysis.attribute_classes import attribute_classes
from amp_lint.analysis.builder import build_model
from amp_lint.analysis.caller_search import CallerSearch
from amp_lint.analysis.caller_search import defines_method as _defines_method
from amp_lint.analysis.callers import MAX_MODULE_BYTES
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.foreign_modules import ForeignModule
from amp_lint.analysis.function_summary import Summary, call_params
from amp_lint.analysis.instance_calls import InstanceCalls
from amp_lint.analysis.instance_calls import held_by as _held_by
from amp_lint.analysis.project import ModuleInfo, ProjectIndex
from amp_lint.analysis.project import qualified_in as _qualified
from amp_lint.analysis.project_hooks import ACTIVE, FOLLOWED_CALLS, SUMMARIES, ProjectAnswers
from amp_lint.analysis.scaler_scan import drives_a_scaler
from amp_lint.analysis.single_pass_loops import single_pass_loops
from amp_lint.analysis.steps import once_per_call, runs_a_loop_of_its_own, with_helpers_inlined
from amp_lint.parse.cst_parse import parse_module

# A module whose text has none of these cannot hold an event of the training-step protocol (a backward, a
# scaler call, an optimizer step, a clip, a gradient read, zero_grad): its functions' summaries would be empty,
# so it is never parsed (LibCST costs ~1.4 us a byte) and its calls stay unknown, as without a project.
_MAY_TOUCH_THE_PROTOCOL = re.compile(rb"backward|autograd|scale|clip_grad|\.grad\b|zero_grad|\.step\(")
_NAMES_A_SCALER = re.compile("scaler", re.IGNORECASE)
_IMPORTS = re.compile(rb"^\s*(?:from|import)\s", re.M)  # a module that may call another one's gradient code
MAX_MODULES_PER_FILE = 6  # other modules one checked file's analysis may read (each a LibCST parse)
_MAX_BASE_DEPTH = 3
_READS_AND_CLIPS = frozenset({EventKind.GRAD_READ, EventKind.CLIP})  # a loop of these is no training loop


class ProjectSummaries(CallerSearch, InstanceCalls, ProjectAnswers):
    """The cross-file summary provider of one run (one per worker process); while a file is checked it is the
    file model's `project_hooks.project()`."""

    def __init__(self, index: ProjectIndex) -> None:
        self.index = index
        self._modules: Dict[Tuple[str, str], Optional[ForeignModule]] = {}
        self._model_paths: Dict[int, str] = {}  # id(model) -> path, for the foreign models built here
        self._building: List[str] = []  # paths whose model is being built (the checked file first)
        self._read_for_file: Dict[str, None] = {}  # foreign paths the current file's analysis read
        self._self_attrs: Dict[Tuple[str, str], Dict[str, Dict[str, str]]] = {}
        self._loadable_at: Dict[str, Tuple[Tuple[int, int], bool]] = {}  # path -> (stamp, worth a parse)
        self._caller_modules: Dict[Tuple[str, str], Optional[ForeignModule]] = {}  # callers read for AMP013
        self._scan_sets: Dict[str, Optional[Tuple[str, ...]]] = {}
        self._reading_callers = False  # a caller's model needs its call sites only: no summaries for it
        self.following_functions = False  # `function_of` answers `gradient_effects` (a file that drives no scaler)
        self._tried_with_imports: Dict[Tuple[str, str], None] = {}

    # --- the checked file ---
    @contextlib.contextmanager
    def checking(self, path: str, source: Optional[str] = None) -> Iterator[None]:
        """Follow the calls of the file at `path` while its analysis runs. A file whose text never names a
        scaler cannot drive one (only a scope with a scaler event asks for summaries, and a scaler is known
        by its name, its `GradScaler` construction or a `...Scaler` annotation): nothing is set up for it."""
        if source is not None and not _NAMES_A_SCALER.search(source):
            yield
            return
        self.index.add_file(Path(path))
        self._building = [os.path.abspath(path)]
        self._read_for_file = {}
        SUMMARIES.append(self.provide)
        FOLLOWED_CALLS.append(self.follows)
        ACTIVE.append(self)
        try:
            yield
        finally:
            ACTIVE.remove(self)
            SUMMARIES.remove(self.provide)
            FOLLOWED_CALLS.remove(self.follows)
            self._building = []

    @contextlib.contextmanager
    def following(self, path: str) -> Iterator[None]:
        """While this runs, `gradient_effects` resolves the calls of the file at `path` (and of modules read for
        it) to other modules' functions through `function_of`, whatever the file drives (AMP100 on an fp32 file).
        Use a provider of its own, not the checker's (its models are memoised with this mode's answers)."""
        self.index.add_file(Path(path))
        saved = (self._building, self._read_for_file, self.following_functions)
        self._building, self._read_for_file, self.following_functions = [os.path.abspath(path)], {}, True
        ACTIVE.append(self)
        try:
            yield
        finally:
            ACTIVE.remove(self)
            self._building, self._read_for_file, self.following_functions = saved

    def function_of(self, model, target: str):
        """(model, scope) of the top-level function of another project module that the name `target` calls in
        `model` (through its imports, or the one star-imported module that defines it). A module is read when it
        could touch gradients or imports one that could (within the size and count bounds); each one read is a
        dependency of the file's result. None otherwise."""
        path = self._model_paths.get(id(model)) or (self._building[0] if self._building else None)
        if path is None or not target or target.startswith("self."):
            return None
        try:
            info = self.index.module_at(Path(path))
            qualified = _qualified(info, target) if info is not None else None
            resolved = self.index.resolve(qualified) if qualified is not None else None
            if info is not None and qualified is None and "." not in target and not info.defines(target):
                found = [r for r in (self.index.resolve(f"{star}.{target}") for star in info.star_imports) if r is not None]
                resolved = found[0] if len({(os.path.abspath(r[0].path), r[1]) for r in found}) == 1 else None
            if resolved is None:
                return None
            module_info, name = resolved
            if name not in module_info.functions or os.path.abspath(module_info.path) == os.path.abspath(path):
                return None
            self.index.note_read(module_info.path)
            foreign = self._load(module_info, imports_too=True)
        except (RecursionError, MemoryError):
            raise
        except Exception:  # an unreadable corner of another module never costs this file its answer
            return None
        if foreign is None or foreign.model is None:
            return None
        scopes = [s for s in foreign.model.scopes if s.is_function and s.class_name is None and s.parent is not None
                  and not s.parent.is_function and s.node.name.value == name]  # fmt: skip
        return (foreign.model, scopes[0]) if len(scopes) == 1 else None

    @property
    def files_read(self) -> List[str]:
        return list(self._read_for_file)

    # --- what the file model asks about other modules (`project_hooks.ProjectAnswers`) ---
    def scaler_factory(self, name: str) -> Optional[str]:
        return project_factories.scaler_factory(self, name)

    def autocast_factory(self, name: str) -> Optional[Tuple[str, Optional[str], Optional[bool]]]:
        return project_factories.autocast_factory(self, name)

    def built_in_a_base(self, model, scope, attribute: str) -> Optional[str]:
        return scaler_classes.built_in_a_base(self, model, scope, attribute)

    def derives_from_torch_scaler(self, qualified: str) -> bool:
        return scaler_classes.derives_from_torch_scaler(self, qualified)

    def project_class_binds(self, model, qualified: str, names: frozenset) -> bool:
        return scaler_classes.project_class_binds(self, model, qualified, names)

    # --- the provider ---
    def follows(self, target: str) -> bool:
        """Could the dotted callee `target` of the module being built be a project function or method?
        (`pkg_module.func` through an import, `self.attr.method` for an attribute holding a project object.)"""
        if not self._building or self._reading_callers:
            return False
        path = self._building[-1]
        info = self.index.module_at(Path(path))
        if info is None:
            return False
        parts = target.split(".")
        try:
            if self.instance_holder(target) is not None:
                return self.instance_method(info, target) is not None
            if parts[0] == "self":
                return len(parts) == 3 and any(parts[1] in attrs for attrs in self.attribute_classes_of(info, path).values())
            qualified = _qualified(info, target)
            return qualified is not None and self._could_summarise(qualified) and self.index.resolve(qualified) is not None
        except (RecursionError, MemoryError):
            raise
        except Exception:
            return False

    def _could_summarise(self, qualified: str) -> bool:
        """Cheap, before `resolve` reads module facts: is the module `qualified` names one whose functions this
        provider could summarise (`_parse`: small, and with a word of the protocol in it)? A package's
        `__init__` may re-export from anywhere: `resolve` decides. On torch's own tests this spares reading
        the facts of some sixty large modules per file."""
        module = qualified.rpartition(".")[0]
        while module:
            path = self.index.path_of_module(module)
            if path is not None:
                return os.path.basename(path) == "__init__.py" or self._loadable(path)
            module = module.rpartition(".")[0]
        return False

    def _loadable(self, path: str) -> bool:
        key = os.path.abspath(path)
        try:
            stat = os.stat(key)
        except OSError:
            return False
        stamp = (stat.st_size, stat.st_mtime_ns)
        cached = self._loadable_at.get(key)
        if cached is None or cached[0] != stamp:
            loadable = False
            if stat.st_size <= MAX_MODULE_BYTES:
                try:
                    with open(key, "rb") as handle:
                        loadable = _MAY_TOUCH_THE_PROTOCOL.search(handle.read(MAX_MODULE_BYTES + 1)) is not None
                except OSError:
                    loadable = False
            cached = self._loadable_at[key] = (stamp, loadable)
        self.index.note_read(key)  # the answer depends on the module's text: so does the file's result
        return cached[1]

    def provide(self, model, call):
        """The Summary of the project function that `call` (a CALL event of `model`) calls, or None."""
        if self._reading_callers:
            return None
        try:
            return self._provide(model, call)
        except (RecursionError, MemoryError):
            raise
        except Exception:  # an unreadable corner of another file never costs this file its findings
            return None

    def _provide(self, model, call):
        path = self._model_paths.get(id(model)) or (self._building[-1] if self._building else None)
        target = call.target or ""
        if path is None or not target:
            return None
        if id(model) not in self._model_paths and not drives_a_scaler(call.scope):
            return None  # lazy: only the steps whose protocol the callee could change are worth a module read
        info = self.index.module_at(Path(path))
        if info is None:
            return None
        found = self._callee(model, info, path, call, target)
        if found is None:
            return None
        foreign, class_name, function = found
        parts = target.split(".")
        holder = ".".join(parts[:2]) if parts[0] == "self" and len(parts) == 3 else self.instance_holder(target)
        return self._summary_of(foreign, class_name, function, holder)

    def _callee(self, model, info: ModuleInfo, path: str, call, target: str) -> Optional[Tuple[ForeignModule, Optional[str], str]]:
        parts = target.split(".")
        if self.instance_holder(target) is not None:  # `Callback(...).on_backward(self)`
            return self.instance_method(info, target)
        if parts[0] == "self":
            class_name = call.scope.class_name
            if class_name is None:
                return None
            if len(parts) == 2:  # `self.method()`: a method inherited from a class of another module
                if _defines_method(model, class_name, parts[1]):
                    return None  # defined here (ambiguously, or the file would have followed it)
                return self._method_in_bases(info, class_name, parts[1], 0)
            if len(parts) == 3:  # `self.attr.method()`: attr holds an instance of a project class
                qualified = self.attribute_classes_of(info, path).get(class_name, {}).get(parts[1])
                if qualified is None:
                    return None
                return self._method_of_class(qualified, parts[2], 0)
            return None
        qualified = _qualified(info, target)
        if qualified is None:
            return None
        resolved = self.index.resolve(qualified)
        if resolved is None:
            return None
        module_info, name = resolved
        if name not in module_info.functions or module_info.path == os.path.abspath(path):
            return None
        foreign = self._load(module_info)
        return (foreign, None, name) if foreign is not None else None

    def _method_in_bases(self, info: ModuleInfo, class_name: str, method: str, depth: int):
        if depth > _MAX_BASE_DEPTH or class_name not in info.classes:
            return None
        for base in info.classes[class_name]:
            qualified = _qualified(info, base) or (f"{info.name}.{base}" if info.name and base in info.classes else None)
            if qualified is None:
                continue
            found = self._method_of_class(qualified, method, depth + 1)
            if found is not None:
                return found
        return None

    def _method_of_class(self, qualified: str, method: str, depth: int):
        """The method `method` of the project class `qualified`, looked up along its bases (first base first;
        a second base defining it too makes the lookup ambiguous: None)."""
        resolved = self.index.resolve(qualified)
        if resolved is None:
            return None
        module_info, class_name = resolved
        if class_name not in module_info.classes:
            return None
        foreign = self._load(module_info)
        if foreign is None:
            return None
        if _defines_method(foreign.model, class_name, method):
            return foreign, class_name, method
        return self._method_in_bases(module_info, class_name, method, depth)

    def attribute_classes_of(self, info: ModuleInfo, path: str) -> Dict[str, Dict[str, str]]:
        """class -> attribute -> qualified project class (`attribute_classes.attribute_classes`), cached."""
        key = (info.path, info.digest)
        cached = self._self_attrs.get(key)
        if cached is None:
            cached = self._self_attrs[key] = attribute_classes(info, path)
        return cached

    # --- modules and their models ---
    def _load(self, info: ModuleInfo, imports_too: bool = False) -> Optional[ForeignModule]:
        path = os.path.abspath(info.path)
        if path in self._building:
            return None  # a cycle of imports being analysed: unknown
        key = (path, info.digest)
        if key in self._modules and (self._modules[key] is not None or not imports_too or key in self._tried_with_imports):
            foreign = self._modules[key]
            if foreign is not None:
                self._read_for_file.setdefault(path)
            return foreign
        if len(self._read_for_file) >= MAX_MODULES_PER_FILE:
            return None
        if imports_too:
            self._tried_with_imports[key] = None
        foreign = self._parse(path, info.digest, imports_too=imports_too)
        self._modules[key] = foreign
        if foreign is not None:
            self._read_for_file.setdefault(path)
        return foreign

    def _parse(self, path: str, digest: str, any_text: bool = False, imports_too: bool = False) -> Optional[ForeignModule]:
        try:
            if os.path.getsize(path) > MAX_MODULE_BYTES:
                return None
            with open(path, "rb") as handle:
                data = handle.read()
            if not any_text and not _MAY_TOUCH_THE_PROTOCOL.search(data) and not (imports_too and _IMPORTS.search(data)):
                return None  # nothing in it can scale, backpropagate, step, clip or read gradients: not worth a parse
            code = data.decode("utf-8-sig")
            module = parse_module(code)
        except (OSError, UnicodeDecodeError, cst.ParserSyntaxError, cst.CSTValidationError, RecursionError):
            return None
        foreign = ForeignModule(path, digest, module, code)
        self._building.append(path)
        try:
            foreign.model = build_model(module, follow_every_call=True)
        except RecursionError:
            return None
        finally:
            self._building.pop()
        self._model_paths[id(foreign.model)] = path
        return foreign

    def _summary_of(self, foreign: ForeignModule, class_name: Optional[str], function: str, holder: Optional[str] = None):
        model = foreign.model
        candidates = [
            s
            for s in model.scopes
            if s.is_function
            and s.node.name.value == function
            and s.class_name == class_name
            and s.parent is not None
            and not s.parent.is_function
        ]
        if len(candidates) != 1:
            return None
        callee = candidates[0]
        counts = lambda e: e.kind not in _READS_AND_CLIPS  # noqa: E731
        if runs_a_loop_of_its_own(callee.events, counts):
            return None  # a loop of its own: a training loop, not a step part (a loop over parameters is)
        self._building.append(foreign.path)
        try:
            inner = with_helpers_inlined(model, callee, callee.events, depth=1, active={callee})
            inner = once_per_call(inner, single_pass_loops(callee.events, counts))
        finally:
            self._building.pop()
        if not inner:
            return None
        params = call_params(callee, class_name)
        if class_name is not None and _order_unknown(model, callee, class_name, inner):
            return None
        if holder is not None:  # the method's `self` is the caller's `self.attr`
            inner = [_held_by(event, holder) for event in inner]
        return Summary(scope=callee, events=tuple(inner), params=tuple(params))

    # --- placing findings ---
    def foreign_place(self, node: cst.CSTNode) -> Optional[Tuple[str, object]]:
        """(path, CodeRange) of a node of another module read for the current run, else None."""
        for foreign in list(self._modules.values()) + list(self._caller_modules.values()):
            if foreign is None:
                continue
            code_range = foreign.range_of(node)
            if code_range is not None:
                return foreign.path, code_range
        return None


def _order_unknown(model, callee, class_name: str, inner) -> bool:
    """Does another method of the callee's class drive the same scaler of its object (fastai's callbacks:
    `before_step` steps `self.learn.scaler`, `after_step` updates it)? Then the protocol's order depends on
    who calls those methods when, which this call does not show: unknown."""
    protocol = (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.SCALER_UNSCALE, EventKind.SCALER_SCALE)
    mine = {e.receiver for e in inner if e.kind in protocol and (e.receiver or "").startswith("self.")}
    mine |= {e.scaled_by for e in inner if e.scaled_by and e.scaled_by.startswith("self.")}
    if not mine:
        return False
    for scope in model.scopes:
        if scope is callee or not scope.is_function or scope.class_name != class_name:
            continue
        for event in scope.events:
            if event.kind in protocol and event.receiver in mine:
                return True
            if event.scaled_by in mine:
                return True
    return False


def callers_in_project(model, scope) -> List[Tuple[object, object]]:
    """For a rule: the calls of `scope` (a function or method of the checked file's `model`) made in other
    modules of the project, as (caller model, CallSite); empty without a project (stdin, the API without
    an index) or for a model that is not the checked file's."""
    if not ACTIVE:
        return []
    provider = ACTIVE[-1]
    if id(model) in provider._model_paths:
        return []  # a module read on the checked file's behalf: its callers are not this run's question
    try:
        return provider.callers_of(scope)
    except (RecursionError, MemoryError):
        raise
    except Exception:
        return []


def attribute_kept_in_project(model, attribute: str) -> Optional[bool]:
    """For a rule: True when no file of the checked file's project updates the attribute `attribute` or hands
    it on (`callers.attribute_kept`); None without a project or for a model that is not the checked file's."""
    if not ACTIVE:
        return None
    provider = ACTIVE[-1]
    if id(model) in provider._model_paths:
        return None
    try:
        return provider.attribute_kept(attribute)
    except (RecursionError, MemoryError):
        raise
    except Exception:
        return None

