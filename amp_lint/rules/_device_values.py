"""What AMP075 (and the other device rules) ask about device values: whether a `.device` is a tensor's (always
indexed on CUDA), whether an expression can take a postfix, and the fixes that replace a device argument."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import project, values
from amp_lint.analysis.dict_splats import splat_entries
from amp_lint.analysis.file_model import FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.tensor_evidence import is_tensor_in
from amp_lint.analysis.value_types import Index, Kind, Value
from amp_lint.diagnostics import Applicability, Confidence
from amp_lint.fixes.builder import FixBuilder, with_call_args
from amp_lint.rules._helpers import definitions, literal_string, short, value_of
from amp_lint.rules.base import Finding, Fix, Rule

def tensor_device(node: cst.BaseExpression, scope: Optional[Scope], model: Optional[FileModel] = None) -> bool:
    """Is `node` the `.device` of a tensor, shown by the code itself: `x.device` where the function also reads
    `x.shape` / `x.dtype` / `x.size()`, casts or moves `x`, or `next(m.parameters()).device`? A tensor on CUDA
    always has an index (`cuda:0`), so `str()` of its device is never a device type (issue 26, principle 4)."""
    if not isinstance(node, cst.Attribute) or node.attr.value != "device":
        return False
    owner = node.value
    if isinstance(owner, cst.Call) and isinstance(owner.func, cst.Name) and owner.func.value == "next" and owner.args:
        inner = owner.args[0].value
        return isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value == "parameters"
    if not isinstance(owner, cst.Name) or owner.value in ("self", "cls") or scope is None or not scope.is_function:
        return False
    return is_tensor_in(model, owner.value, scope, depth=0)


def tensor_device_value(model: FileModel, node: cst.BaseExpression, scope: Optional[Scope]) -> bool:
    """`tensor_device`, or a local name every definition of which is `x.device` of a tensor `x`
    (`module_device = x.device`)."""
    if tensor_device(node, scope, model):
        return True
    if not isinstance(node, cst.Name) or scope is None or not scope.is_function:
        return False
    atoms = value_of(model, node, scope).atoms
    return bool(atoms) and all(_assigned_tensor_device(model, a.defined_at, scope) for a in atoms)


def _assigned_tensor_device(model: FileModel, node: Optional[cst.CSTNode], scope: Scope) -> bool:
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1:
        node = node.body[0]
    if isinstance(node, (cst.Assign, cst.AnnAssign)):
        node = node.value
    return isinstance(node, cst.Attribute) and tensor_device(node, scope, model)


_DEVICE_ONLY = ("type", "index")  # attributes a torch.device has and a str has not


def read_as_device(model: FileModel, node: cst.BaseExpression, scope: Optional[Scope]) -> bool:
    """Does the code itself show that `node` (a name or dotted attribute) is a torch.device: it reads
    `node.type` or `node.index` (not called, not assigned), which a device string has not (issue 26,
    principle 4, duck typing)? Where the same value is read: a local name in its function, `self.x` in the
    methods of its class (or the class's declared `-> torch.device` property `x`), a module-level name
    (an imported module's attribute, `flair.device`) anywhere in the file."""
    text = dotted_name(node)
    if text is None or scope is None:
        return False
    root = text.split(".")[0]
    if root in ("self", "cls"):
        cls = model.classes.get(scope.class_name or "")
        if cls is None:
            return False
        if root == "self" and text.count(".") == 1 and _declared_device_property(model, cls, text.split(".")[1], scope):
            return True
        where: cst.CSTNode = cls
    elif scope.is_function and (root in scope.params or root in scope.assignments):
        where = scope.node
    elif scope.names.lookup(root) is not None:  # an imported module or name: the same object file-wide
        where = model.module
    else:
        where = scope.node
    finder = _DeviceReads(text)
    where.visit(finder)
    return finder.found and not finder.called


class _DeviceReads(cst.CSTVisitor):
    def __init__(self, text: str) -> None:
        self.text = text
        self.found = False
        self.called = False  # `x.type(...)`: a tensor's method, not a device's attribute
        self._targets: set = set()

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in _DEVICE_ONLY:
            if dotted_name(node.func.value) == self.text:
                self.called = True
            self._targets.add(id(node.func))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._targets.add(id(node.target))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in _DEVICE_ONLY and id(node) not in self._targets and dotted_name(node.value) == self.text:
            self.found = True


def _declared_device_property(model: FileModel, cls: cst.ClassDef, attr: str, scope: Scope) -> bool:
    """`@property def attr(self) -> torch.device` in the class itself or (through the project index) in a
    project base class of another module (transformers' `PreTrainedModel.device`)."""
    bound = [
        s
        for s in cls.body.body
        if (isinstance(s, cst.FunctionDef) and s.name.value == attr)
        or (isinstance(s, cst.SimpleStatementLine) and attr in (dotted_name(t.target) for a in s.body if isinstance(a, cst.Assign) for t in a.targets))
    ]
    if bound:  # one getter, no setter: what every instance answers
        only = bound[0]
        return (
            len(bound) == 1
            and isinstance(only, cst.FunctionDef)
            and any(dotted_name(d.decorator) == "property" for d in only.decorators)
            and only.returns is not None
            and scope.names.qualify(only.returns.annotation) == "torch.device"
        )
    checked = project.checked_file()
    if checked is None or "." in (scope.class_name or "."):
        return False
    index, path = checked
    try:
        info = index.add_file(Path(path))
        return index.declared_property(info, scope.class_name, attr) == "torch.device"
    except (RecursionError, MemoryError):
        raise
    except Exception:  # an unreadable corner of another module never costs this file its findings
        return False


def certainly_indexed(resolved: Value) -> bool:
    return bool(resolved.indexed()) and all(a.certain for a in resolved.atoms)


def postfix_ok(node: cst.BaseExpression) -> bool:
    """`node.type` / `torch.device(node)` can be written from the node's code as it is."""
    return isinstance(node, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) and not node.lpar


def model_string(model: FileModel, value: str) -> str:
    return FixBuilder(model.module).string(value)


def replace_fix(model: FileModel, node: cst.BaseExpression, code: str, applicability: Applicability) -> Fix:
    builder = FixBuilder(model.module)
    new = builder.expression(code)
    builder.replace(node, lambda updated: new)
    return builder.build(f"Use `{code}`", applicability)


def insert_device_fix(model: FileModel, call: cst.Call, devices) -> Optional[Fix]:
    if len(devices) != 1:
        return None
    device = next(iter(devices))
    builder = FixBuilder(model.module)
    literal = builder.string(device)
    builder.replace(
        call, lambda updated: with_call_args(updated, [cst.Arg(value=cst.SimpleString(literal)), *updated.args])
    )
    return builder.build(f"Pass device_type {literal} (the device of the file's other autocast regions)", Applicability.UNSAFE)


# --- AMP075's checks of a device argument that is not a literal -------------------------------------------


def check_str_call(rule: Rule, model: FileModel, value: cst.Call, scope: Scope) -> Iterator[Finding]:
    """`str(device)`: 'cuda:0' for an indexed device."""
    inner = value.args[0].value
    resolved = value_of(model, inner, scope)
    if resolved.known and resolved.kind in (Kind.STRING, Kind.DEVICE) and not resolved.indexed():
        if resolved.kind is Kind.STRING or resolved.no_index:
            return  # str() of a string, or of a device without an index
    # A tensor's device (the function reads its shape, casts or moves it) carries an index on CUDA: proved.
    proven = (
        (resolved.kind is Kind.DEVICE and resolved.certain)
        or tensor_device_value(model, inner, scope)
        or (not any(a.kind is Kind.STRING for a in resolved.atoms) and read_as_device(model, inner, scope))
    )
    if not proven and not resolved.indexed() and dotted_name(inner) is None:
        return  # str() of something nobody knows
    text = code_of(inner)
    torch_name = values.of(model.module).torch_name(scope.node)
    if resolved.known and torch_name is not None and all(a.kind is Kind.STRING for a in resolved.atoms):
        # str() of a device *string* is the string: it has no `.type`; torch.device(s).type is the type of
        # every value it can have, indexed or not.
        wanted = f"{torch_name}.device({text}).type"
        yield rule.finding(
            value,
            f"device_type `{short(value)}` is a device string with an index on some paths; use `{wanted}`",
            fix=replace_fix(model, value, wanted, Applicability.SAFE),
            confidence=Confidence.HIGH if certainly_indexed(resolved) else Confidence.MEDIUM,
            context=scope.name,
            related=definitions(resolved, "set"),
        )
        return
    yield rule.finding(
        value,
        f"device_type `{short(value)}` is 'cuda:0' for an indexed device; use `{text}.type`",
        fix=replace_fix(model, value, f"{text}.type", Applicability.SAFE if proven else Applicability.UNSAFE)
        if postfix_ok(inner)
        else None,
        confidence=Confidence.HIGH if proven or certainly_indexed(resolved) else Confidence.MEDIUM,
        context=scope.name,
        related=definitions(resolved, "set"),
    )

def check_resolved(rule: Rule, model: FileModel, value: cst.BaseExpression, scope: Scope) -> Iterator[Finding]:
    """A name, attribute, subscript or helper call: what it resolves to."""
    resolved = value_of(model, value, scope)
    text = code_of(value)
    if not resolved.known:
        # An indexed device string that some assignment gives it (`self.device = "cuda:0"` when CUDA is
        # there, the argument otherwise): wrong on that path.
        literal = next((a for a in resolved.indexed() if a.kind is Kind.STRING and isinstance(a.literal, str)), None)
        if literal is not None:
            yield rule.finding(
                value,
                f"device_type `{short(value)}` is `{literal.literal}` on some paths, with a device index; "
                f"autocast wants the device type, `torch.device({text}).type`",
                confidence=Confidence.MEDIUM,
                assumption="assumes a path that sets the indexed value runs",
                context=scope.name,
                related=(("set", literal.defined_at),) if literal.defined_at is not None else (),
            )
        return
    if resolved.kind is Kind.DEVICE:
        if resolved.certain:
            yield rule.finding(
                value,
                f"device_type `{short(value)}` is a torch.device, not a string: ValueError; use `{text}.type`",
                fix=replace_fix(model, value, f"{text}.type", Applicability.SAFE) if postfix_ok(value) else None,
                context=scope.name,
                related=definitions(resolved, "set"),
            )
        elif isinstance(value, cst.Attribute) and value.attr.value == "device":
            yield rule.finding(
                value,
                f"device_type `{short(value)}` looks like a tensor's torch.device, not a string: "
                f"ValueError; use `{text}.type`",
                confidence=Confidence.MEDIUM,
                context=scope.name,
            )
        return
    if any(a.kind is not Kind.STRING for a in resolved.atoms):
        return
    indexed = resolved.indexed()
    suspect = [a for a in resolved.atoms if a.stringified and a.index is Index.MAYBE]
    if not indexed and not suspect:
        return
    torch_name = values.of(model.module).torch_name(scope.node)
    fix = None
    certain = bool(indexed) and all(a.certain for a in resolved.atoms)
    # `dt = str(x.device)` of a tensor `x`, every definition so: proved as the direct form is.
    tensor_strings = bool(suspect) and len(suspect) == len(resolved.atoms) and all(
        _str_of_tensor_device(model, a.defined_at, scope) for a in suspect
    )
    if (certain or tensor_strings) and torch_name is not None and postfix_ok(value):
        fix = replace_fix(model, value, f"{torch_name}.device({text}).type", Applicability.SAFE)
    maybe = "" if len(resolved.atoms) == 1 else " on some paths"
    if indexed and isinstance(indexed[0].literal, str):
        what = f"is `{indexed[0].literal}`{maybe}, with a device index"
    elif indexed:
        what = f"carries a device index{maybe}"
    else:
        what = f"is str() of a device{maybe}: 'cuda:0' for an indexed device"
    one_type = indexed and indexed[0].device_type and len(resolved.atoms) == 1
    wanted = f"`{indexed[0].device_type}`" if one_type else f"`torch.device({text}).type`"
    yield rule.finding(
        value,
        f"device_type `{short(value)}` {what}; autocast wants the device type, {wanted} "
        "(with an index it skips CUDA's availability checks)",
        fix=fix,
        confidence=Confidence.HIGH if certain or tensor_strings else Confidence.MEDIUM,
        context=scope.name,
        related=definitions(Value(tuple(indexed or suspect)), "set"),
    )


def _str_of_tensor_device(model: FileModel, node: Optional[cst.CSTNode], scope: Scope) -> bool:
    """Is `node` (a definition: the value, or the statement that holds it) `str(x.device)` of a tensor `x`?"""
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1:
        node = node.body[0]
    if isinstance(node, (cst.Assign, cst.AnnAssign)):
        node = node.value
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "str"
        and len(node.args) == 1
        and tensor_device_value(model, node.args[0].value, scope)
    )


def check_splats(rule: Rule, model: FileModel, call: cst.Call, scope: Scope) -> Iterator[Finding]:
    """`autocast(**amp_kwargs)` with a dict the file writes out (issue 46, principle 1: values that travel):
    its `device_type` is checked as if written in the call, without a fix (the dict may
    serve other calls); a `device` key where `device_type` is meant, or no device at all, is a TypeError."""
    if any(arg.star == "*" for arg in call.args):
        return
    splats = [arg.value for arg in call.args if arg.star == "**"]
    entries = {}
    for splat in splats:
        found = splat_entries(values.of(model.module), splat, scope.node, getattr(model, "parents", None))
        if found is None:
            return
        entries.update(found)
    if "device_type" in entries:
        for finding in check_device(rule, model, call, entries["device_type"], scope):
            yield replace(finding, fix=None, node=call, message=f"through `{short(call)}`: {finding.message}")
        return
    if "device" in entries:
        what = "`device=`, which autocast does not take (its parameter is `device_type`)"
    else:
        what = "no device_type (a required argument)"
    yield rule.finding(
        call,
        f"`{short(call)}` passes {what}: TypeError at the first call (the dict's keys: "
        f"{', '.join(sorted(entries)) or 'none'})",
        context=scope.name,
    )


def check_device(rule: Rule, model: FileModel, call: cst.Call, value: cst.BaseExpression, scope: Scope) -> Iterator[Finding]:
    """AMP075's question about one device_type value: an indexed literal or f-string, `str()` of a device, a
    torch.device, or what a name, attribute, subscript or helper call resolves to."""
    literal = literal_string(value)
    if literal is not None:
        if ":" in literal:
            yield rule.finding(
                value,
                f"device_type `{literal}` carries a device index; autocast wants the device type "
                f"`{literal.split(':')[0]}` (with an index it skips CUDA's availability checks)",
                fix=replace_fix(model, value, model_string(model, literal.split(":")[0]), Applicability.SAFE),
                context=scope.name,
            )
        return
    if isinstance(value, cst.FormattedString):
        head = value.parts[0] if value.parts else None
        if isinstance(head, cst.FormattedStringText) and ":" in head.value:
            device = head.value.split(":")[0]
            yield rule.finding(
                value,
                f"device_type `{code_of(value)}` carries a device index; use the device type `{device}`",
                fix=replace_fix(model, value, model_string(model, device), Applicability.SAFE),
                context=scope.name,
            )
        return
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "str" and len(value.args) == 1:
        yield from check_str_call(rule, model, value, scope)
        return
    if isinstance(value, cst.Call) and scope.names.qualify(value.func) == "torch.device":
        inner = literal_string(value.args[0].value) if value.args else None
        yield rule.finding(
            value,
            f"device_type `{short(value)}` is a torch.device, not a string: ValueError",
            fix=replace_fix(model, value, model_string(model, inner.split(":")[0]), Applicability.SAFE)
            if inner is not None and len(value.args) == 1
            else None,
            context=scope.name,
        )
        return
    yield from check_resolved(rule, model, value, scope)
