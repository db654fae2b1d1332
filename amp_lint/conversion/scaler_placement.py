"""Where the one GradScaler of a training run is created, and how it reaches the training step.

A GradScaler's scale is learnt over the run (it starts at 65536 and settles after a few skipped steps): it must
live as long as the optimizer it steps. So it is created where the optimizer is:

- the optimizer is a local of the function that trains: the scaler is created there, before the outermost
  training loop;
- the optimizer is a parameter (`train(model, loader, optimizer)` called once per epoch from `main`): the
  function gets a `scaler` parameter and each caller creates the scaler where *its* optimizer lives and passes
  `scaler=scaler`, up through several callers when the optimizer is passed down;
- the optimizer is `self.optimizer`: the scaler is `self.scaler`, created right after `self.optimizer = ...`;
- the optimizer is a global or a variable of an enclosing function (`def _update(engine, batch)` nested in a
  trainer factory, called per iteration by the engine): the scaler is created next to it, in that scope;
- never in a function that runs once per epoch or per iteration.

Where the optimizer's state is saved (`"optimizer": optimizer.state_dict()`), the scaler's state is saved beside
it; beside every `optimizer.load_state_dict(checkpoint["optimizer"])` the scaler's state is loaded when the
checkpoint has it (`if "scaler" in checkpoint:`), whether or not this file saves it: the converted file must pass
AMP080 (the optimizer's state checkpointed and the scaler's not).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple

import libcst as cst

from amp_lint.analysis.file_model import Scope
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.walk import visit_read_only
from amp_lint.conversion.call_sites import argument_for, references
from amp_lint.conversion.caller_scaler import scaler_in_caller
from amp_lint.conversion.project_callers import project_calls
from amp_lint.conversion.refusals import Refusal
from amp_lint.conversion.syntax import (
    add_keyword,
    add_parameter,
    append_with_comma,
    guarded_scaler_restore,
    restored_checkpoint,
)
from amp_lint.conversion.training_steps import amp_in_reach

if TYPE_CHECKING:
    from amp_lint.fixes.types import FileEdit
    from amp_lint.conversion.devices import DeviceExpression
    from amp_lint.conversion.edits import EditPlanner

#: How many callers up a scaler is passed down through parameters.
MAX_PASSING_DEPTH = 4


@dataclass
class _Creation:
    scope: Scope
    anchor: cst.CSTNode
    after: bool
    optimizer: Optional[str]  # the optimizer's key in `scope`, for the checkpoint edits
    device_hints: Set[str] = field(default_factory=set)  # names holding the step's device in `scope`


class ScalerPlacement:
    """Plans the scaler's creation(s) and the parameters that carry it to the training step."""

    def __init__(self, planner: "EditPlanner", name: str) -> None:
        self.planner = planner
        self.ctx = planner.ctx
        self.tree = planner.tree
        self.model = planner.model
        self.builder = planner.builder
        self.name = name
        self.creations: List[_Creation] = []
        self.attribute: Optional[str] = None
        self._parameters_added: Set[int] = set()
        self._hints: Set[str] = set()
        self._passed_device: Dict[int, str] = {}
        # Edits of other files (the scaler beside an optimizer another module creates): part of the same fix.
        self.file_edits: List["FileEdit"] = planner.file_edits

    # --- the plan ---
    def plan(self) -> str:
        """Record the edits; return how the training step spells the scaler (`scaler`, `self.scaler`)."""
        planner = self.planner
        scope = planner.scope
        first = planner.iterations[0]
        optimizer = next((s.target for it in planner.iterations for s in it.optimizer_steps if s.target), None)
        step_function = first.is_step_function
        loops = planner._outermost_loops()
        if optimizer is not None and optimizer.startswith("self.") and scope.class_name:
            if self._on_the_instance(scope, optimizer):
                assert self.attribute is not None
                self._emit()
                return self.attribute
        self._home(scope, optimizer, loops, depth=0, step_function=step_function)
        self._emit()
        return self.name

    def _home(
        self,
        scope: Scope,
        optimizer: Optional[str],
        loops: List[cst.CSTNode],
        depth: int,
        step_function: bool,
        hints: Optional[Set[str]] = None,
    ) -> None:
        self._hints = set(hints or ())
        binding = self._binding(scope, optimizer)
        if binding is None or (binding[0] is scope and binding[1] == "local"):
            self._create_before(scope, loops, optimizer)
            return
        owner, kind = binding
        if owner is scope:  # a parameter: the callers hold the optimizer
            if self._pass_in(scope, optimizer or "", depth, step_function, loops):
                return
            if step_function or not loops:
                self._refuse_step_function(scope)
            self._create_before(scope, loops, optimizer)
            return
        # A global, or a variable of an enclosing function: the scaler lives beside it.
        root = (optimizer or "").split(".")[0]
        holder = self._block_holder(scope, owner)
        if kind == "local":
            statement = owner.assignments[root][0][1]
            if len(owner.assignments[root]) == 1 and statement is not None and holder is not None:
                block = self.tree.block_of(holder)
                top = self.tree.child_in(statement, block) if block is not None else None
                if top is not None and self.tree.position(top) < self.tree.position(holder):
                    self.creations.append(_Creation(owner, top, True, root, self._hints))
                    return
        elif holder is not None:  # a parameter of the enclosing function: before the nested function
            self.creations.append(_Creation(owner, holder, False, root, self._hints))
            return
        if step_function or not loops:
            self._refuse_step_function(scope)
        self._create_before(scope, loops, optimizer)

    def _binding(self, scope: Scope, key: Optional[str]) -> Optional[Tuple[Scope, str]]:
        """The scope that binds the optimizer's root name, and whether as a "param" or a "local"."""
        if not key or key.startswith("self."):
            return None
        root = key.split(".")[0]
        for outer in scope.chain():
            if root in outer.params:
                return outer, "param"
            if root in outer.assignments:
                return outer, "local"
        return None

    def _block_holder(self, scope: Scope, owner: Scope) -> Optional[cst.CSTNode]:
        """The statement of `owner`'s body that holds `scope`'s function (its `def`)."""
        node = scope.node
        if not isinstance(node, cst.FunctionDef):
            return None
        body = owner.node if isinstance(owner.node, cst.Module) else owner.node.body
        if not isinstance(body, (cst.IndentedBlock, cst.Module)):
            return None
        return self.tree.child_in(node, body)

    def _create_before(self, scope: Scope, loops: List[cst.CSTNode], optimizer: Optional[str]) -> None:
        per_run = self._beside_a_per_run_optimizer(scope, loops, optimizer)
        if per_run is not None:
            self.creations.append(_Creation(scope, per_run, True, optimizer, self._hints))
            return
        if loops:
            anchor = self.planner._before_all(loops)
        elif scope is self.planner.scope:
            anchor = self.planner._scaler_anchor()
        else:
            raise Refusal("could not place the GradScaler before the training loop")
        self.creations.append(_Creation(scope, anchor, False, optimizer, self._hints))

    def _beside_a_per_run_optimizer(
        self, scope: Scope, loops: List[cst.CSTNode], optimizer: Optional[str]
    ) -> Optional[cst.CSTNode]:
        """`for lr in lrs: optimizer = SGD(...); for x, y in loader: ...`: a loop builds an optimizer per run, so
        each run gets its own scaler, right after its optimizer (one above the loop would carry one run's scale
        into the next). Returns the statement to create the scaler after, or None."""
        if not optimizer or "." in optimizer or not loops:
            return None
        values = scope.assignments.get(optimizer, [])
        inside = [st for _, st in values if st is not None and any(self.tree.is_inside(st, loop) for loop in loops)]
        if not inside:
            return None
        if len(inside) != 1 or len(values) != 1 or self.tree.block_of(inside[0]) is None:
            raise Refusal(
                f"`{optimizer}` is created in several places inside the loop that trains; "
                "create it once per run to convert"
            )
        return inside[0]

    # --- passing the scaler in ---
    def _pass_in(self, scope: Scope, optimizer: str, depth: int, step_function: bool, loops: List[cst.CSTNode]) -> bool:
        """Add a `scaler` parameter and let each caller create (or pass on) the scaler; False when not possible."""
        function = scope.node
        if not isinstance(function, cst.FunctionDef) or depth >= MAX_PASSING_DEPTH:
            return False
        sites, complete = references(self.ctx, function)
        name = function.name.value
        if not complete:
            if step_function:
                raise Refusal(
                    f"`{name}` runs one training step, but not all of its call sites are visible in this file "
                    "(the GradScaler must be created once, outside the loop that calls it)"
                )
            if self._scaler_in_other_module(scope, function, optimizer, sites):
                return True
            return False
        in_loops = [call for call, _ in sites if self.tree.loops_around(call)]
        if not step_function and not in_loops:
            return False  # called once per run: the scaler it creates lives as long as the run
        if not step_function and all(self._optimizer_made_per_call(function, call, caller, optimizer) for call, caller in sites):
            return False  # `for config in configs: optimizer = ...; train(model, optimizer)`: one call per optimizer
        if step_function and len(in_loops) < len(sites):
            call = next(call for call, _ in sites if not self.tree.loops_around(call))
            raise Refusal(
                f"`{name}` runs one training step but `{code_of(call.func)}(...)` is not called from a loop: "
                "the GradScaler must be created once, outside the training loop"
            )
        parameter = optimizer.split(".")[0]
        by_caller: Dict[int, Tuple[Scope, List[cst.Call]]] = {}
        for call, caller in sites:
            if caller is None or caller is scope:
                raise Refusal(f"`{name}` calls itself")
            if amp_in_reach(self.model, caller):
                raise Refusal(f"`{name}` is called where AMP is already set up; fix that code with the other AMP rules")
            by_caller.setdefault(id(caller.node), (caller, []))[1].append(call)
        self._add_parameter(function)
        for caller, calls in by_caller.values():
            keys = set()
            for call in calls:
                self.builder.replace(call, lambda node: add_keyword(node, self.name))
                arg = argument_for(function, call, parameter)
                keys.add(dotted_name(arg.value) if arg is not None else None)
            key = keys.pop() if len(keys) == 1 else None
            hints: Set[str] = set()
            device_variable = self._device_variable_in(scope)
            if device_variable is not None:
                for call in calls:
                    arg = argument_for(function, call, device_variable)
                    name = dotted_name(arg.value) if arg is not None else None
                    if name is not None:
                        hints.add(name)
                        if name in caller.params:
                            self._passed_device[id(caller.node)] = name
            caller_loops: List[cst.CSTNode] = []
            for call in calls:
                around = self.tree.loops_around(call)
                if around and not any(around[0] is loop for loop in caller_loops):
                    caller_loops.append(around[0])
            if not caller_loops:
                statement = self.tree.enclosing_statement(calls[0])
                if statement is None:
                    raise Refusal(f"could not place the GradScaler before the call of `{name}`")
                self.creations.append(_Creation(caller, statement, False, key, hints))
                continue
            if key is not None and key.startswith("self.") and caller.class_name and self._on_the_instance(caller, key):
                # The caller's class holds the optimizer: it holds the scaler too and passes `self.scaler`.
                for call in calls:
                    self.builder.replace(call, lambda node: _pass_attribute(node, self.name, self.attribute))
                continue
            self._home(caller, key, caller_loops, depth + 1, step_function=False, hints=hints)
        return True

    def _scaler_in_other_module(self, scope: Scope, function: cst.FunctionDef, optimizer: str, sites) -> bool:
        """`train_one_epoch(model, loader, optimizer)` called per epoch from another module: a scaler created in it
        would restart every epoch; its place (beside the optimizer, with the checkpoint) is in that file. The
        function gets a `scaler` parameter and the caller's file a `FileEdit` (`caller_scaler`). False when no
        loop of another module calls it (the scaler it creates lives as long as the call)."""
        if scope.class_name is not None or scope.parent is None or scope.parent.is_function:
            return False
        name = scope.name or ""
        calls = project_calls(name)
        looped = [(path, line) for path, line, in_loop in calls if in_loop]
        if not looped:
            return False
        where = ", ".join(f"{os.path.basename(path)}:{line}" for path, line in looped[:3])
        if sites:
            raise Refusal(
                f"`{name}` is called in this file and in a loop of another module ({where}): a GradScaler created "
                "inside it would restart on every call, and it has no one place beside its optimizer"
            )
        try:
            edit = scaler_in_caller(function, calls, optimizer.split(".")[0], self.name, self.planner.autocast_device)
        except Refusal as refusal:
            raise Refusal(
                f"`{name}` receives `{optimizer.split('.')[0]}` and is called in a loop from another module ({where}): "
                f"a GradScaler created inside it would restart on every call, and it cannot go beside the optimizer there: {refusal}"
            ) from None
        self._add_parameter(function)
        self.file_edits.append(edit)
        return True

    def _optimizer_made_per_call(
        self, function: cst.FunctionDef, call: cst.Call, caller: Optional[Scope], optimizer: str
    ) -> bool:
        """Is the optimizer passed at `call` created in the innermost loop around the call (a fresh optimizer for
        each call, as in a hyperparameter sweep)? Then each call is a whole run, and its scaler lives in it."""
        loops = self.tree.loops_around(call)
        if caller is None or not loops:
            return not loops
        arg = argument_for(function, call, optimizer.split(".")[0])
        key = dotted_name(arg.value) if arg is not None else None
        if key is None or "." in key:
            return False
        values = caller.assignments.get(key, [])
        innermost = loops[-1] if len(loops) > 0 else None
        return bool(values) and all(st is not None and self.tree.is_inside(st, innermost) for _, st in values)

    def _device_variable_in(self, scope: Scope) -> Optional[str]:
        """The parameter of `scope` that the step's device expression reads (`device` in `device.type`)."""
        if scope is not self.planner.scope:
            return self._passed_device.get(id(scope.node))
        device = self.planner.autocast_device
        if device is not None and device.variable is not None and device.variable in scope.params:
            return device.variable
        return None

    def _add_parameter(self, function: cst.FunctionDef) -> None:
        if id(function) in self._parameters_added:
            return
        self._parameters_added.add(id(function))
        self.builder.replace(function.params, lambda params: add_parameter(params, self.name))

    def _refuse_step_function(self, scope: Scope) -> None:
        name = scope.name or "this code"
        raise Refusal(
            f"`{name}` runs one training step but its optimizer comes from code not visible in this file: "
            "the GradScaler must be created once, where the optimizer is"
        )

    # --- the scaler on the instance ---
    def _on_the_instance(self, scope: Scope, optimizer: str) -> bool:
        """`self.optimizer = ...` in one method of the class: `self.scaler = ...` goes right after it."""
        statements = [
            (statement, owner)
            for owner in self.model.scopes
            if owner.class_name == scope.class_name
            for _, statement in owner.assignments.get(optimizer, [])
        ]
        if len(statements) != 1 or statements[0][0] is None or self.tree.block_of(statements[0][0]) is None:
            return False
        statement, owner = statements[0]
        if self.attribute is None:
            taken = {key.split(".", 1)[1] for s in self.model.scopes if s.class_name == scope.class_name
                     for key in s.assignments if key.startswith("self.")}  # fmt: skip
            self.attribute = "self." + self.ctx.fresh_name(self.planner.scaler_candidates, taken)
        if not any(c.anchor is statement for c in self.creations):
            self.creations.append(_Creation(owner, statement, True, optimizer))
        return True

    # --- output ---
    def _emit(self) -> None:
        planner = self.planner
        for creation in self.creations:
            self._keep_before_checkpoint_loads(creation)
        for creation in self.creations:
            scope = creation.scope
            target = self.attribute if creation.optimizer and creation.optimizer.startswith("self.") and self.attribute else self.name
            device = self._device_for(creation)
            if device.variable is not None and not creation.after and not planner._bound_before(scope, device.variable, creation.anchor):
                raise Refusal(f"`{device.variable}` is not bound before the GradScaler can be created")
            torch_name = planner._torch(scope)
            statement = self.builder.statement(f"{target} = {torch_name}.amp.GradScaler({device.code})\n")
            if creation.after:
                self.builder.insert_after(creation.anchor, statement)
            else:
                planner._insert_before(creation.anchor, statement, priority=0)
            if creation.optimizer:
                self._checkpoint_edits(creation, target)

    def _device_for(self, creation: _Creation) -> "DeviceExpression":
        """The step's own device expression where it is visible here, else the one this scope uses."""
        planner = self.planner
        scope = creation.scope
        own = planner.autocast_device
        if own is not None and own.variable is not None and "." not in own.variable and not planner.devices.explicit:
            binding = self._binding(planner.scope, own.variable)
            if binding is not None and binding[0] is not planner.scope and binding[0] in list(scope.chain()):
                shadowing = self._shadowing(scope, binding[0], own.variable)
                if shadowing is None:
                    return own  # a global (or an enclosing function's variable) seen from both places
                # `def __init__(self, ..., device=None)` (an nn.Module's factory keyword) beside the optimizer:
                # the name there is not the device the training step uses.
                raise Refusal(
                    f"the GradScaler belongs beside `{creation.optimizer or 'the optimizer'}` in "
                    f"`{scope.name or 'module level'}`, where `{own.variable}` is {shadowing}, not the "
                    f"`{own.variable}` the training step uses (`{own.code}`): set the `amp-device` option to convert"
                )
        position = self.tree.position(creation.anchor) + (1 if creation.after else 0)
        transfers = planner._transfer_names(scope) | creation.device_hints
        return planner.devices.resolve(scope, position, transfers)

    @staticmethod
    def _shadowing(scope: Scope, owner: Scope, name: str) -> Optional[str]:
        """How `scope` (or a scope between it and `owner`) rebinds `name`: "its own parameter", "a local", or None."""
        for current in scope.chain():
            if current is owner:
                return None
            if name in current.params:
                return f"a parameter of `{current.name}`" if current is not scope else "its own parameter"
            if name in current.assignments:
                return "a local variable"
        return None

    def _state_calls(self, scope: Scope, optimizer: str) -> "_StateCalls":
        """Where `scope` saves and loads the optimizer's state: `{"optimizer": optimizer.state_dict()}`,
        `dict(optimizer=optimizer.state_dict())`, `state["optimizer"] = optimizer.state_dict()`, and
        `optimizer.load_state_dict(checkpoint["optimizer"])`."""
        found = _StateCalls()
        root = scope.node

        def is_state_dict(value: cst.BaseExpression) -> bool:
            return (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                    and value.func.attr.value == "state_dict" and dotted_name(value.func.value) == optimizer)

        class Find(cst.CSTVisitor):
            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return node is root

            def visit_DictElement(self, node: cst.DictElement) -> None:
                if is_state_dict(node.value):
                    found.saves.append(node)

            def visit_Call(self, node: cst.Call) -> None:
                if isinstance(node.func, cst.Name) and node.func.value == "dict":
                    found.saves.extend(a for a in node.args if a.keyword is not None and is_state_dict(a.value))
                elif is_state_dict(node):
                    found.state_dict_calls += 1

            def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
                if len(node.body) != 1:
                    return
                small = node.body[0]
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and is_state_dict(small.value):
                    target = small.targets[0].target
                    if isinstance(target, cst.Subscript) and dotted_name(target.value) is not None:
                        found.assigned.append(node)  # `state["optimizer"] = optimizer.state_dict()`
                checkpoint = restored_checkpoint(node, optimizer)
                if checkpoint is not None:
                    found.loads.append((node, checkpoint))  # `optimizer.load_state_dict(checkpoint["optimizer"])`
        # fmt: skip

        visit_read_only(root, Find())
        return found

    def _keep_before_checkpoint_loads(self, creation: _Creation) -> None:
        """A scaler created before the training loop may come after the optimizer's state is loaded: move it up."""
        if creation.after or not creation.optimizer:
            return
        loads = self._state_calls(creation.scope, creation.optimizer).loads
        if not loads or min(self.tree.position(load) for load, _ in loads) > self.tree.position(creation.anchor):
            return
        values = creation.scope.assignments.get(creation.optimizer, [])
        block = self.tree.block_of(creation.anchor)
        statement = values[0][1] if len(values) == 1 else None
        top = self.tree.child_in(statement, block) if statement is not None and block is not None else None
        if top is None or any(self.tree.position(load) < self.tree.position(top) for load, _ in loads):
            raise Refusal(
                f"`{creation.optimizer}`'s state is loaded from a checkpoint before the GradScaler can be created "
                "beside it; create the optimizer in the same block as the training loop"
            )
        creation.anchor, creation.after = top, True

    def _checkpointing_scopes(self, creation: _Creation) -> List[Scope]:
        """Where the optimizer's state may be saved and loaded: the scope that creates it, or, for `self.optimizer`,
        every method of its class (a trainer's `save()` / `load()` beside the `__init__` that builds it)."""
        scope = creation.scope
        if not (creation.optimizer or "").startswith("self.") or scope.class_name is None:
            return [scope]
        return [s for s in self.model.scopes if s.is_function and s.class_name == scope.class_name]

    def _checkpoint_edits(self, creation: _Creation, target: str) -> None:
        """The scaler's state goes wherever the optimizer's is saved, and is restored, guarded, wherever the
        optimizer's is restored, each on its own: the converted file must pass AMP080, which the tool ships (a
        checkpoint saved here may be resumed by another script; one restored here may have been saved by
        another, before or after the conversion, so the restore reads the scaler's entry only when it is
        there). A restore from a checkpoint with no name (`torch.load(path)["optimizer"]`) gets nothing: the fix
        check then decides, by AMP080's finding, whether the conversion may be written."""
        assert creation.optimizer is not None
        calls = _StateCalls()
        for scope in self._checkpointing_scopes(creation):
            found = self._state_calls(scope, creation.optimizer)
            calls.saves += found.saves
            calls.assigned += found.assigned
            calls.loads += found.loads
        key = self.builder.string("scaler")
        for element in calls.saves:
            def add(node: cst.CSTNode, element: cst.CSTNode = element) -> cst.CSTNode:
                if isinstance(node, cst.Call):  # `dict(optimizer=optimizer.state_dict(), ...)`
                    new_arg = cst.Arg(cst.parse_expression(f"{target}.state_dict()"), keyword=cst.Name("scaler"),
                                      equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
                    args = list(node.args)
                    index = next(i for i, a in enumerate(args) if a is element)
                    if index + 1 < len(args):
                        args.insert(index + 1, new_arg.with_changes(comma=args[index].comma))
                        return node.with_changes(args=args)
                    return node.with_changes(args=append_with_comma(args, new_arg))
                assert isinstance(node, cst.Dict)
                new = cst.DictElement(cst.parse_expression(key), cst.parse_expression(f"{target}.state_dict()"))
                elements = list(node.elements)
                index = next(i for i, e in enumerate(elements) if e is element)
                if index + 1 < len(elements):  # in the middle: the new entry repeats this one's comma and layout
                    elements.insert(index + 1, new.with_changes(comma=elements[index].comma))
                    return node.with_changes(elements=elements)
                return node.with_changes(elements=append_with_comma(elements, new))

            parent = self.tree.parent_of(element)
            if isinstance(parent, (cst.Dict, cst.Call)):
                self.builder.replace(parent, add)
        for statement in calls.assigned:
            subscript = statement.body[0].targets[0].target  # type: ignore[attr-defined]
            holder = code_of(subscript.value)
            self.builder.insert_after(statement, self.builder.statement(f"{holder}[{key}] = {target}.state_dict()\n"))
        for load, checkpoint in calls.loads:
            self.builder.insert_after(load, self.builder.statement(guarded_scaler_restore(target, checkpoint, key)))


@dataclass
class _StateCalls:
    saves: List[cst.CSTNode] = field(default_factory=list)  # dict entries / `dict(...)` keywords
    assigned: List[cst.SimpleStatementLine] = field(default_factory=list)  # `state["optimizer"] = ...state_dict()`
    loads: List[Tuple[cst.SimpleStatementLine, str]] = field(default_factory=list)  # (statement, its checkpoint)
    state_dict_calls: int = 0


def _pass_attribute(node: cst.CSTNode, name: str, attribute: Optional[str]) -> cst.CSTNode:
    """`train_step(batch, scaler=scaler)` -> `train_step(batch, scaler=self.scaler)`."""
    assert isinstance(node, cst.Call) and attribute is not None
    args = list(node.args)
    for index, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[index] = arg.with_changes(value=cst.parse_expression(attribute))
    return node.with_changes(args=args)
