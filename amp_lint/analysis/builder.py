"""The tree walk that builds a file's model: `build_model(module) -> FileModel`.

One walk over the LibCST tree (`walk.Walker`, no metadata providers) in source order. `ModelBuilder`
keeps the stacks of where the walk is (scope, class, statement, loops, `if` branches, autocast regions)
and makes a `Scope` per function; its hooks for calls are in `calls.CallRecorder`, for assignments
(scalers, optimizers, autocast contexts) in `assignments.AssignmentRecorder`, for autocast `with` items
and decorators in `autocast_regions.AutocastRecorder`. After the walk (`finish`), the method calls are
classified (`calls`), autocast specs resolved (`autocast_regions.resolve_spec`) and the events grouped
into training steps (`steps`).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import libcst as cst

from amp_lint.analysis.assignments import AssignmentRecorder
from amp_lint.analysis.autocast import AutocastBinding
from amp_lint.analysis.autocast_regions import AutocastRecorder, resolve_spec
from amp_lint.analysis.calls import CallRecorder, RawCall
from amp_lint.analysis.events import AutocastRegion, Branch, Event
from amp_lint.analysis.file_model import AssignmentSite, CallSite, DeprecatedUse, FileModel, ScalerBinding, Scope
from amp_lint.analysis.leaving_branches import LEAVES_FUNCTION, close_block, ends_with, pop_branch
from amp_lint.analysis.names import NameTable
from amp_lint.analysis.parameter_loops import ParameterLoops
from amp_lint.analysis.steps import training_steps
from amp_lint.analysis.syntax import Loop, Statement
from amp_lint.analysis.walk import Walker


class ModelBuilder(CallRecorder, AssignmentRecorder, AutocastRecorder, ParameterLoops, Walker):
    """The walk's state and its structural hooks: scopes, statements, branches, loops."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__()
        self.module = module
        self.module_scope = Scope(node=module, name="", parent=None)
        self.scopes: List[Scope] = [self.module_scope]
        self.scope_stack: List[Scope] = [self.module_scope]
        self.class_stack: List[str] = []
        self.classes_open_at: List[int] = [0]  # per scope on scope_stack: how many classes enclosed it
        self.statement_stack: List[Statement] = []
        self.flow_stack: List[cst.CSTNode] = []  # statements and one-line suites: the flow graph's nodes
        self.small_statement: Optional[cst.BaseSmallStatement] = None
        self.loop_stack: List[List[Loop]] = [[]]  # per scope
        self.branch_stack: List[List[Branch]] = [[]]
        self.region_stack: List[List[AutocastRegion]] = [[]]
        self.events: List[Event] = []
        self.wrapper_backwards: List[Event] = []
        self.raw_calls: List[RawCall] = []
        self.pending_follows: List[Event] = []  # dotted calls a summary provider may follow (see finish)
        self.follow_every_call = False
        self.regions: List[AutocastRegion] = []
        self.framework_regions: List[AutocastRegion] = []
        self.autocast_bindings: Dict[Tuple[int, str], AutocastBinding] = {}
        self.scalers: Dict[str, List[ScalerBinding]] = {}
        self.optimizer_keys: set = set()
        self.deprecated_uses: List[DeprecatedUse] = []
        self.functions: Dict[str, List[cst.FunctionDef]] = {}
        self.classes: Dict[str, cst.ClassDef] = {}
        self.imports: List[Tuple[Union[cst.Import, cst.ImportFrom], Scope]] = []
        self.amp_module_refs: List[Tuple[cst.Name, Scope]] = []
        self.deprecated_value_refs: List[Tuple[cst.Name, Scope]] = []
        self.counter = 0
        self.consumed_scale_calls: set = set()
        self.scale_calls: List[Tuple[cst.Call, str, RawCall]] = []
        self.with_regions: Dict[cst.With, List[AutocastRegion]] = {}
        self.scaler_call_sites: list = []
        self.autocast_calls: list = []
        self.call_sites: List[CallSite] = []
        self.assignment_sites: List[AssignmentSite] = []
        self.unpacked_sites: List[AssignmentSite] = []
        self.grad_rescales: List[AssignmentSite] = []
        self.decorator_nodes: Dict[cst.CSTNode, cst.Decorator] = {}
        self.skip_reference: set = set()
        # Expressions whose value is a callable that will be called later (assigned, or given to partial).
        self.factory_positions: set = set()
        self.block_depths: List[int] = []
        self.leaves_function: set = set()  # ids of the branch markers of an `if` whose body ends in return/raise
        self.parameter_names: List[frozenset] = []  # per enclosing for-loop or comprehension: parameters
        self.group_names: List[frozenset] = []  # ... and parameter groups (`for g in opt.param_groups`)
        self._prepare_module_names()

    # --- names ---
    def _prepare_module_names(self) -> None:
        """Module-level imports and definitions, known before any function body is read."""
        table = self.module_scope.names
        definitions = set()
        for statement in self._top_level_statements(self.module.body):
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Import):
                        table.bind_import(small)
                    elif isinstance(small, cst.ImportFrom):
                        table.bind_import_from(small)
        for statement in self.module.body:  # unconditional definitions hide an import of the same name
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                definitions.add(statement.name.value)
        for name in definitions:
            table.imported.pop(name, None)
            table.bind_local(name)

    def _top_level_statements(self, body: Sequence[cst.CSTNode]) -> Iterator[cst.CSTNode]:
        for statement in body:
            yield statement
            if isinstance(statement, cst.Try):
                # Handlers first: one runs only where the `try` body failed, so the body's binding is the one
                # in effect wherever it works (a `torch.amp` import with a `torch.cuda.amp` fallback: torch.amp's).
                for handler in statement.handlers:
                    yield from self._top_level_statements(handler.body.body)
                yield from self._top_level_statements(statement.body.body)
                if statement.orelse:
                    yield from self._top_level_statements(statement.orelse.body.body)
            elif isinstance(statement, cst.If):
                yield from self._top_level_statements(statement.body.body)
                orelse = statement.orelse
                while orelse is not None:
                    yield from self._top_level_statements(orelse.body.body)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None

    @property
    def scope(self) -> Scope:
        return self.scope_stack[-1]

    def qualify(self, node: cst.BaseExpression) -> Optional[str]:
        return self.scope.names.qualify(node)

    # --- scopes ---
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.setdefault(node.name.value, node)
        self.scope.names.bind_local(node.name.value)
        self.class_stack.append(node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.class_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        parent = self.scope
        self.functions.setdefault(node.name.value, []).append(node)
        if parent.is_function or not self.class_stack:
            parent.names.bind_local(node.name.value)
        class_name = self.class_stack[-1] if self.class_stack else None
        prefix = class_name if class_name else (parent.name if parent.name else "")
        # A method of a class defined inside a function is that class's; a closure in a method keeps its
        # method's class.
        in_class_body = len(self.class_stack) > self.classes_open_at[-1]
        scope = Scope(
            node=node,
            name=f"{prefix}.{node.name.value}" if prefix else node.name.value,
            parent=parent,
            class_name=class_name if in_class_body or not parent.is_function else parent.class_name,
            names=NameTable(parent.names),
        )
        for param in self._parameters(node.params):
            scope.params[param.name.value] = param.annotation.annotation if param.annotation is not None else None
            scope.names.bind_local(param.name.value)
        # Decorators run in the enclosing scope.
        for decorator in node.decorators:
            self.decorator_nodes[decorator.decorator] = decorator
        region = self._decorator_region(node)
        self.scopes.append(scope)
        self.scope_stack.append(scope)
        self.classes_open_at.append(len(self.class_stack))
        self.loop_stack.append([])
        self.branch_stack.append([])
        self.region_stack.append([])
        if region is not None:
            region.scope = scope
            scope.decorator_region = region
            scope.regions.append(region)
            self.regions.append(region)
            self.region_stack[-1].append(region)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope_stack.pop()
        self.classes_open_at.pop()
        self.loop_stack.pop()
        self.branch_stack.pop()
        self.region_stack.pop()

    @staticmethod
    def _parameters(params: cst.Parameters) -> Iterator[cst.Param]:
        yield from params.posonly_params
        yield from params.params
        yield from params.kwonly_params
        if isinstance(params.star_arg, cst.Param):
            yield params.star_arg
        if params.star_kwarg is not None:
            yield params.star_kwarg

    # --- statements, blocks, branches, loops ---
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.statement_stack.append(node)
        self.flow_stack.append(node)

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self.statement_stack.pop()
        self.flow_stack.pop()

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
        self.flow_stack.append(node)

    def leave_SimpleStatementSuite(self, original_node: cst.SimpleStatementSuite) -> None:
        self.flow_stack.pop()

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.flow_stack.append(node)

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self.flow_stack.pop()

    def _enter_compound(self, node: Statement) -> None:
        self.statement_stack.append(node)
        self.flow_stack.append(node)

    def _leave_compound(self) -> None:
        self.statement_stack.pop()
        self.flow_stack.pop()

    def visit_Expr(self, node: cst.Expr) -> None:
        self.small_statement = node

    def visit_Return(self, node: cst.Return) -> None:
        self.small_statement = node
        if node.value is not None:
            self._note_factory_positions(node.value)

    def visit_Import(self, node: cst.Import) -> None:
        self.imports.append((node, self.scope))
        if self.scope.is_function:
            self.scope.names.bind_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.append((node, self.scope))
        if self.scope.is_function:
            self.scope.names.bind_import_from(node)

    def visit_If(self, node: cst.If) -> None:
        self._enter_compound(node)

    def leave_If(self, original_node: cst.If) -> None:
        self._leave_compound()
        if original_node.orelse is None and _ends_in_jump(original_node.body):
            # `if critic_phase: ...; continue` - the rest of the block is the else branch of that `if`.
            marker = Branch(node=original_node, taken=False)
            self.branch_stack[-1].append(marker)
            if ends_with(original_node.body, LEAVES_FUNCTION):  # issue 46: past this block (leaving_branches)
                self.leaves_function.add(id(marker))

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.block_depths.append(len(self.branch_stack[-1]))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        close_block(self.branch_stack[-1], self.block_depths.pop(), self.leaves_function)

    def _push_branch(self, node: cst.If, taken: bool) -> None:
        self.branch_stack[-1].append(Branch(node=node, taken=taken))

    def visit_If_body(self, node: cst.If) -> None:
        self._push_branch(node, True)

    def leave_If_body(self, node: cst.If) -> None:
        pop_branch(self.branch_stack[-1], node, True)

    def visit_If_orelse(self, node: cst.If) -> None:
        self._push_branch(node, False)

    def leave_If_orelse(self, node: cst.If) -> None:
        pop_branch(self.branch_stack[-1], node, False)

    def visit_For(self, node: cst.For) -> None:
        self._enter_compound(node)

    def leave_For(self, original_node: cst.For) -> None:
        self._leave_compound()

    def visit_For_body(self, node: cst.For) -> None:
        self.loop_stack[-1].append(node)
        self.enter_parameter_loop(node)

    def leave_For_body(self, node: cst.For) -> None:
        self.loop_stack[-1].pop()
        self.leave_parameter_loop()

    def visit_Comparison(self, node: cst.Comparison) -> None:
        # `p.grad is not None` asks whether there is a gradient; it does not read its value.
        if any(isinstance(c.comparator, cst.Name) and c.comparator.value == "None" for c in node.comparisons):
            self.skip_reference.add(node.left)

    def visit_While(self, node: cst.While) -> None:
        self._enter_compound(node)

    def leave_While(self, original_node: cst.While) -> None:
        self._leave_compound()

    def visit_While_body(self, node: cst.While) -> None:
        self.loop_stack[-1].append(node)

    def leave_While_body(self, node: cst.While) -> None:
        self.loop_stack[-1].pop()

    def visit_Try(self, node: cst.Try) -> None:
        self._enter_compound(node)

    def leave_Try(self, original_node: cst.Try) -> None:
        self._leave_compound()

    # --- after the walk ---
    def finish(self) -> FileModel:
        model = FileModel(
            module=self.module,
            scopes=self.scopes,
            events=self.events,
            regions=self.regions,
            scalers=self.scalers,
            optimizer_keys=self.optimizer_keys,
            deprecated_uses=self.deprecated_uses,
            functions=self.functions,
            classes=self.classes,
            imports=self.imports,
            module_names=self.module_scope.names,
            amp_module_refs=self.amp_module_refs + self.deprecated_value_refs,
            scaler_call_sites=self.scaler_call_sites,
            autocast_calls=self.autocast_calls,
            call_sites=self.call_sites,
            assignment_sites=self.assignment_sites,
            unpacked_sites=self.unpacked_sites,
            grad_rescales=self.grad_rescales,
            parents=self.parents,
            wrapper_backwards=self.wrapper_backwards,
            framework_regions=self.framework_regions,
        )
        self.resolve_followed_calls(model, before_classification=True)
        self.propagate_through_calls(model)
        self.classify_raw_calls(model)
        self.resolve_followed_calls(model, before_classification=False)
        for region in self.regions:
            resolve_spec(region.spec, region.scope or self.module_scope, self.module_scope)
        for scope in self.scopes:
            scope.events.sort(key=lambda e: e.index)
        model.events.sort(key=lambda e: e.index)
        model.steps = training_steps(model)
        return model


def _ends_in_jump(body: cst.BaseSuite) -> bool:
    """Does the block end with `continue`, `break`, `return` or `raise`?"""
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body:
        return isinstance(last.body[-1], (cst.Continue, cst.Break, cst.Return, cst.Raise))
    return False


def build_model(module: cst.Module, follow_every_call: bool = False) -> FileModel:
    """The analysis model of one module. `follow_every_call`: ask the summary providers about every dotted
    call (a module read for another file's analysis, whose functions are step parts), not only those of
    functions that drive a scaler (see `CallRecorder.resolve_followed_calls`)."""
    builder = ModelBuilder(module)
    builder.follow_every_call = follow_every_call
    builder.walk(module)
    return builder.finish()
