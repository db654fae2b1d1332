"""The GradScaler of a trainer called from another module, placed in that module (issue 32, item 3).

`train_one_epoch(model, loader, optimizer, device)` called once per epoch from `main.py`, where the optimizer is
created: a scaler created inside the trainer would restart every epoch. Its place is beside the optimizer, in
the caller's file. This module makes that file's edits (a `FileEdit` of the conversion's fix, written with the
trainer's file, all or none):

- `scaler = torch.amp.GradScaler(<device>)` right after the one statement that creates the optimizer passed in
  (`optimizer = torch.optim.AdamW(...)`), in the scope that holds the calls;
- `scaler=scaler` added to every call of the trainer (the trainer gets a `scaler` parameter);
- the scaler's state saved where the optimizer's is (`"optimizer": optimizer.state_dict()`), and loaded after
  every `optimizer.load_state_dict(checkpoint["optimizer"])` when the checkpoint has it.

The device is the trainer's own device expression with the caller's argument for its device parameter in it
(`device.type` with `device` passed), or its literal. Anything less plain (the trainer called from several
files or scopes, an optimizer created in several places or after the device, a name already taken) raises
`Refusal`, naming the call.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from amp_lint.analysis.names import dotted_name
from amp_lint.conversion.call_sites import argument_for
from amp_lint.conversion.refusals import Refusal
from amp_lint.conversion.syntax import add_keyword, append_with_comma, guarded_scaler_restore, restored_checkpoint
from amp_lint.diagnostics import Applicability
from amp_lint.fixes.apply import add_imports, apply_fixes
from amp_lint.fixes.builder import FixBuilder
from amp_lint.fixes.types import FileEdit, Import

if TYPE_CHECKING:
    from amp_lint.conversion.devices import DeviceExpression

_FUNCTION_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def scaler_in_caller(
    function: cst.FunctionDef,
    calls: List[Tuple[str, int, bool]],
    optimizer_parameter: str,
    scaler: str,
    device: Optional["DeviceExpression"],
) -> FileEdit:
    """The edit of the one caller file of `function` (`calls`: `project_callers.project_calls`)."""
    name = function.name.value
    paths = sorted({path for path, _, _ in calls})
    where = ", ".join(f"{os.path.basename(path)}:{line}" for path, line, _ in calls[:3])
    if len(paths) != 1:
        raise Refusal(f"`{name}` is called from several modules ({where}): the GradScaler has no one place beside its optimizer")
    path = paths[0]
    if not all(in_loop for _, _, in_loop in calls):
        raise Refusal(f"`{name}` is also called outside a loop ({where}); the conversion passes the GradScaler only to per-epoch calls")
    from amp_lint.files.sources import SourceError, read_source

    try:
        text = read_source(Path(path)).text
        module = cst.parse_module(text)
    except (SourceError, cst.ParserSyntaxError, OSError) as error:
        raise Refusal(f"could not read `{os.path.basename(path)}`, which calls `{name}` in a loop ({error})") from None
    if re.search(rf"\b{re.escape(scaler)}\b", text):
        raise Refusal(f"`{scaler}` is already a name in `{os.path.basename(path)}`, where the GradScaler would go")
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    lines = {line for _, line, _ in calls}
    found = [node for node, place in positions.items()
             if isinstance(node, cst.Call) and place.start.line in lines and (dotted_name(node.func) or "").rpartition(".")[2] == name]  # fmt: skip
    if len({positions[c].start.line for c in found}) != len(lines):
        raise Refusal(f"could not find the calls of `{name}` in `{os.path.basename(path)}` ({where})")
    scopes = {id(_scope_of(call, parents)): _scope_of(call, parents) for call in found}
    optimizers = {_name_of(argument_for(function, call, optimizer_parameter)) for call in found}
    if len(scopes) != 1 or len(optimizers) != 1 or None in optimizers:
        raise Refusal(f"`{name}` is called in several places or with an optimizer that is not one variable ({where})")
    scope = next(iter(scopes.values()))
    optimizer = optimizers.pop()
    assert optimizer is not None
    creation = _single_assignment(scope, optimizer, parents)
    if creation is None or not all(_before(creation, call, positions) for call in found):
        raise Refusal(f"`{optimizer}` is not created once before the loop that calls `{name}` ({where})")
    device_code = _device_in_caller(function, found, device, scope, creation, positions, parents)
    builder = FixBuilder(module)
    builder.insert_after(creation, builder.statement(f"{scaler} = torch.amp.GradScaler({device_code})\n"))
    for call in found:
        builder.replace(call, lambda node: add_keyword(node, scaler))
    _checkpoint(builder, scope, optimizer, scaler)
    fix = builder.build("the GradScaler beside the optimizer", Applicability.UNSAFE)
    new = add_imports(apply_fixes(module, [fix]), [Import("torch")]).code
    return FileEdit(os.path.abspath(path), text, new)


def _scope_of(node: cst.CSTNode, parents) -> cst.CSTNode:
    while node in parents:
        node = parents[node]
        if isinstance(node, (cst.FunctionDef, cst.Module)):
            return node
    return node


def _name_of(arg: Optional[cst.Arg]) -> Optional[str]:
    return arg.value.value if arg is not None and isinstance(arg.value, cst.Name) else None


def _own_statements(scope: cst.CSTNode):
    """The statements of `scope` (a function or the module), not those of functions or classes inside it."""
    body = scope.body if isinstance(scope, cst.Module) else scope.body.body
    stack = list(body)
    while stack:
        statement = stack.pop()
        yield statement
        if isinstance(statement, _FUNCTION_SCOPES):
            continue
        for child in statement.children:
            if isinstance(child, (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler)):
                child = child.body
            if isinstance(child, cst.IndentedBlock):
                stack.extend(child.body)
            elif isinstance(child, (cst.If, cst.SimpleStatementSuite)):  # an `elif`; a one-line block
                stack.append(child)


def _assigned_names(statement: cst.CSTNode) -> List[str]:
    names: List[str] = []
    if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        for small in statement.body:
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else \
                [small.target] if isinstance(small, (cst.AnnAssign, cst.AugAssign)) else []  # fmt: skip
            for target in targets:
                elements = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
                names += [e.value for e in elements if isinstance(e, cst.Name)]
    elif isinstance(statement, (cst.For, cst.With)):
        target = statement.target if isinstance(statement, cst.For) else None
        if isinstance(target, cst.Name):
            names.append(target.value)
    return names


def _single_assignment(scope: cst.CSTNode, name: str, parents) -> Optional[cst.SimpleStatementLine]:
    """The one statement of `scope` that binds `name`, when it sits in the scope's own body (no `if` around it)."""
    statements = [s for s in _own_statements(scope) if name in _assigned_names(s)]
    if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine):
        return None
    body = scope if isinstance(scope, cst.Module) else scope.body
    return statements[0] if parents.get(statements[0]) is body else None


def _before(statement: cst.CSTNode, node: cst.CSTNode, positions) -> bool:
    return positions[statement].end.line < positions[node].start.line


def _device_in_caller(function, calls, device, scope, creation, positions, parents) -> str:
    """The trainer's device expression as the caller spells it, checked to be bound where the scaler goes."""
    if device is None:
        raise Refusal(f"the device of `{function.name.value}` is not known where its caller creates the optimizer")
    if device.variable is None:
        return device.code
    arguments = [argument_for(function, call, device.variable) for call in calls]
    literals = {a.value.value for a in arguments if a is not None and isinstance(a.value, cst.SimpleString)}
    if len(literals) == 1 and len(arguments) == sum(1 for a in arguments if a is not None and isinstance(a.value, cst.SimpleString)):
        literal = literals.pop()
        return re.sub(rf"(?<![.\w]){re.escape(device.variable)}\b", lambda _: literal, device.code)  # `"cpu"` passed
    values = {_name_of(a) for a in arguments}
    if len(values) != 1 or None in values:
        raise Refusal(f"`{function.name.value}`'s `{device.variable}` is not passed as one variable by its caller")
    value = values.pop()
    assert value is not None
    params = {p.name.value for p in scope.params.params} if isinstance(scope, cst.FunctionDef) else set()
    bound = value in params or any(
        value in _assigned_names(s) and _before(s, creation, positions) or value in _assigned_names(s) and s is creation
        for s in _own_statements(scope)
    )
    if not bound:
        raise Refusal(f"`{value}` is not bound before `{code_of_statement(creation)}`, where the GradScaler would go")
    return re.sub(rf"(?<![.\w]){re.escape(device.variable)}\b", lambda _: value, device.code)


def code_of_statement(statement: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(statement).strip().splitlines()[0]


def _checkpoint(builder: FixBuilder, scope: cst.CSTNode, optimizer: str, scaler: str) -> None:
    """The scaler's state beside the optimizer's in `scope`'s checkpoints: saved wherever the optimizer's is saved,
    and restored (guarded: an older checkpoint has no scaler entry) wherever it is restored, each on its own, as
    in the trainer's own file (`scaler_placement`): the caller's file must pass AMP080 too."""
    saves: List[Tuple[cst.Dict, cst.DictElement]] = []
    loads: List[Tuple[cst.SimpleStatementLine, str]] = []

    def is_state_dict(value: cst.BaseExpression) -> bool:
        return (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                and value.func.attr.value == "state_dict" and dotted_name(value.func.value) == optimizer)  # fmt: skip

    class Find(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is scope

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Dict(self, node: cst.Dict) -> None:
            saves.extend((node, e) for e in node.elements if isinstance(e, cst.DictElement) and is_state_dict(e.value))

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            checkpoint = restored_checkpoint(node, optimizer)
            if checkpoint is not None:
                loads.append((node, checkpoint))

    scope.visit(Find())
    key = builder.string("scaler")
    by_dict: Dict[int, Tuple[cst.Dict, List[cst.DictElement]]] = {}
    for node, element in saves:
        by_dict.setdefault(id(node), (node, []))[1].append(element)
    for node, elements in by_dict.values():
        def add(updated: cst.CSTNode, after: cst.DictElement = elements[-1]) -> cst.CSTNode:
            assert isinstance(updated, cst.Dict)
            new = cst.DictElement(cst.parse_expression(key), cst.parse_expression(f"{scaler}.state_dict()"))
            items = list(updated.elements)
            index = next((i for i, e in enumerate(items) if e is after or e.deep_equals(after)), len(items) - 1)
            if index + 1 < len(items):
                items.insert(index + 1, new.with_changes(comma=items[index].comma))
                return updated.with_changes(elements=items)
            return updated.with_changes(elements=append_with_comma(items, new))

        builder.replace(node, add)
    for statement, checkpoint in loads:
        builder.insert_after(statement, builder.statement(guarded_scaler_restore(scaler, checkpoint, key)))
