"""The fixes of AMP070-AMP073 (`amp07x_deprecated_spelling`), built from how the file spells the API, never by
string surgery:
- through `torch` (`torch.cuda.amp.autocast(...)`, `import torch as T`): the reference becomes
  `torch.amp.autocast("cuda", ...)` in place;
- through an imported symbol (`from torch.cuda.amp import autocast as ac`) or module
  (`import torch.cuda.amp as tca`, `from torch.cuda import amp`): the import is pointed at `torch.amp`
  and every use gains the device argument, as one fix shared by all the uses of that import. When some
  use cannot be rewritten (the name is passed around as a value), the import and its uses are left alone;
- a subclass of the deprecated GradScaler (`class S(torch.cuda.amp.GradScaler)`): the base becomes
  `torch.amp.GradScaler` and its `super().__init__(...)` calls gain the device.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.file_model import DeprecatedUse, FileModel, Scope
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Applicability
from amp_lint.files.torch_version import supports
from amp_lint.fixes.builder import FixBuilder, keyword_arg, split_args
from amp_lint.rules._version_shims import in_old_torch_branch
from amp_lint.rules.base import Fix

# Names that exist in torch.amp under the same name.
_MOVABLE = frozenset({"autocast", "GradScaler", "custom_fwd", "custom_bwd"})
# Parameters of the deprecated autocast classes, in positional order.
_OLD_AUTOCAST_PARAMS = ("enabled", "dtype", "cache_enabled")

ImportNode = Union[cst.Import, cst.ImportFrom]


class SpellingFixer:
    """Builds the fix for each deprecated use; uses of one import share one fix."""

    def __init__(self, model: FileModel, target: Optional[str] = None) -> None:
        self.model = model
        self.target = target
        self._binding_fixes: Dict[int, Optional[Fix]] = {}

    def fix_for(self, use: DeprecatedUse) -> Optional[Fix]:
        head = head_name(use.node)
        if head is None:
            return None
        resolved = use.scope.names.lookup(head.value)
        if resolved == "torch":
            return self._through_torch(use, head)
        binding = self._import_binding(use, head.value, resolved)
        if binding is None:
            return None
        statement, scope = binding
        if id(statement) not in self._binding_fixes:
            self._binding_fixes[id(statement)] = self._rewrite_import_and_uses(statement, scope)
        return self._binding_fixes[id(statement)]

    # -- torch.cuda.amp.X spelled through `torch` --
    def _through_torch(self, use: DeprecatedUse, head: cst.Name) -> Optional[Fix]:
        device, modern = names.DEPRECATED_AMP[use.qualified_name]
        target = use.call if use.call is not None else use.decorator
        if target is None:
            return None
        new_func = cst.Attribute(value=cst.Attribute(value=cst.Name(head.value), attr=cst.Name("amp")), attr=cst.Name(modern))
        builder = FixBuilder(self.model.module)
        if not _can_rewrite(use, modern):
            return None

        def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
            return _rewrite_use(builder, updated, modern, device, new_func)

        builder.replace(target, rewrite)
        return builder.build(f"Use `{head.value}.amp.{modern}`", Applicability.SAFE)

    # -- imported symbol or module --
    def _import_binding(self, use: DeprecatedUse, local: str, resolved: Optional[str]) -> Optional[Tuple[ImportNode, Scope]]:
        if resolved is None:
            return None
        chain = list(use.scope.chain())
        best: Optional[Tuple[ImportNode, Scope]] = None
        for statement, scope in self.model.imports:
            if scope in chain and local in _bound_names(statement):
                if best is None or chain.index(scope) <= chain.index(best[1]):
                    best = (statement, scope)
        return best

    def _rewrite_import_and_uses(self, statement: ImportNode, scope: Scope) -> Optional[Fix]:
        new_statement = _import_pointing_at_torch_amp(statement)
        if new_statement is None:
            return None
        local_names = set(_bound_names(statement))
        uses = [
            use
            for use in self.model.deprecated_uses
            if (head := head_name(use.node)) is not None and head.value in local_names and scope in list(use.scope.chain())
        ]
        if any(name.value in local_names and scope in list(ref_scope.chain()) for name, ref_scope in self.model.amp_module_refs):
            return None  # the module alias is also used for something torch.amp does not have
        if not _import_supported(statement, self.target):
            return None
        builder = FixBuilder(self.model.module)
        for use in uses:
            device, modern = names.DEPRECATED_AMP[use.qualified_name]
            if not _can_rewrite(use, modern) or not supports(self.target, names.REPLACEMENT_SINCE[modern]):
                return None
            if in_old_torch_branch(self.model, use.node):
                return None  # the import also serves a fallback for old torch
            target = use.call if use.call is not None else use.decorator
            builder.replace(target, lambda updated, m=modern, d=device: _rewrite_use(builder, updated, m, d, None))
        builder.replace(statement, lambda updated: new_statement)
        return builder.build("Import from `torch.amp` and pass the device", Applicability.SAFE, key=("AMP07x", statement))


def _import_supported(statement: ImportNode, target: Optional[str]) -> bool:
    """Does every name the rewritten `from torch.amp import ...` would import exist in the target torch?"""
    if isinstance(statement, cst.ImportFrom) and not isinstance(statement.names, cst.ImportStar):
        for alias in statement.names:
            since = names.REPLACEMENT_SINCE.get(dotted_name(alias.name) or "")
            if since is not None and not supports(target, since):
                return False
    return True


def head_name(node: cst.BaseExpression) -> Optional[cst.Name]:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def _bound_names(statement: ImportNode) -> List[str]:
    if isinstance(statement.names, cst.ImportStar):
        return []
    bound = []
    for alias in statement.names:
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            bound.append(alias.asname.name.value)
        elif isinstance(statement, cst.Import):
            bound.append((dotted_name(alias.name) or "").split(".")[0])
        else:
            bound.append(dotted_name(alias.name) or "")
    return bound


def _import_pointing_at_torch_amp(statement: ImportNode) -> Optional[ImportNode]:
    """The same import, from `torch.amp` instead of `torch.cuda.amp` / `torch.cpu.amp`; None if impossible."""
    if isinstance(statement, cst.ImportFrom):
        if statement.relative or statement.module is None or isinstance(statement.names, cst.ImportStar):
            return None
        module = dotted_name(statement.module)
        imported = [dotted_name(alias.name) for alias in statement.names]
        if module in names.DEPRECATED_AMP_MODULES and all(name in _MOVABLE for name in imported):
            return statement.with_changes(module=cst.Attribute(value=cst.Name("torch"), attr=cst.Name("amp")))
        if module in ("torch.cuda", "torch.cpu") and imported == ["amp"]:
            return statement.with_changes(module=cst.Name("torch"))
        return None
    new_names = []
    changed = False
    for alias in statement.names:
        module = dotted_name(alias.name)
        if module in names.DEPRECATED_AMP_MODULES and alias.asname is not None:
            alias = alias.with_changes(name=cst.Attribute(value=cst.Name("torch"), attr=cst.Name("amp")))
            changed = True
        new_names.append(alias)
    return statement.with_changes(names=new_names) if changed else None


def _can_rewrite(use: DeprecatedUse, modern: str) -> bool:
    """A call, or a decorator; not a value passed around."""
    if use.call is not None:
        _, _, has_star = split_args(use.call)
        if has_star:
            return False
        if modern in ("custom_fwd", "custom_bwd"):
            positional, _, _ = split_args(use.call)
            return not positional
        return True
    return use.decorator is not None and modern in ("custom_fwd", "custom_bwd")


def _rewrite_use(builder: FixBuilder, updated: cst.CSTNode, modern: str, device: str, new_func) -> cst.CSTNode:
    """Add the device argument (and keywordize the old autocast positionals) to a call or decorator.

    Existing arguments keep their commas and line breaks; the new device argument copies the layout of
    the argument it goes in front of.
    """
    device_string = cst.SimpleString(builder.string(device))
    if isinstance(updated, cst.Decorator):  # bare @custom_fwd
        func = new_func if new_func is not None else updated.decorator
        return updated.with_changes(decorator=cst.Call(func=func, args=(keyword_arg("device_type", device_string),)))
    assert isinstance(updated, cst.Call)
    func = new_func if new_func is not None else updated.func
    args = list(updated.args)
    if modern in ("autocast", "GradScaler"):
        if modern == "autocast":
            position = 0
            for index, arg in enumerate(args):
                if arg.keyword is None and not arg.star:
                    args[index] = arg.with_changes(
                        keyword=cst.Name(_OLD_AUTOCAST_PARAMS[position]),
                        equal=keyword_arg("x", arg.value).equal,
                    )
                    position += 1
        first = cst.Arg(value=device_string)
        if args:
            first = first.with_changes(comma=_separator(args))
        args.insert(0, first)
    elif not any(a.keyword is not None and a.keyword.value == "device_type" for a in args):
        device_arg = keyword_arg("device_type", device_string)
        if args:
            last = args[-1]
            trailing = last.comma if isinstance(last.comma, cst.Comma) else cst.MaybeSentinel.DEFAULT
            args[-1] = last.with_changes(comma=last.comma if isinstance(last.comma, cst.Comma) else _separator(args))
            device_arg = device_arg.with_changes(comma=trailing)
        args.append(device_arg)
    return updated.with_changes(func=func, args=tuple(args))


def _separator(args) -> cst.Comma:
    """The call's own argument separator: a line break in a one-per-line call, else ", ".

    Borrowed from an argument whose comma carries no comment (a comment belongs to its own argument).
    """
    for arg in args:
        comma = arg.comma
        if not isinstance(comma, cst.Comma):
            continue
        after = comma.whitespace_after
        if isinstance(after, cst.ParenthesizedWhitespace):
            if after.first_line.comment is None and not any(line.comment for line in after.empty_lines):
                return comma
        elif isinstance(after, cst.SimpleWhitespace):
            return comma.with_changes(whitespace_before=cst.SimpleWhitespace(""))
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def base_class_fix(
    model: FileModel, cls: cst.ClassDef, base: cst.Arg, qualified: str, modern: str, device: str
) -> Optional[Fix]:
    """`class S(torch.cuda.amp.GradScaler)` -> `class S(torch.amp.GradScaler)`, its `super().__init__(...)` calls
    gaining the device first (the old parameters follow in the same order).

    Only for GradScaler spelled through `torch`, in a class that defines `__init__` (every construction goes
    through it): without one, `S(1024.0)` would pass the scale as the device.
    """
    head = head_name(base.value)
    if modern != "GradScaler" or head is None or not isinstance(base.value, cst.Attribute):
        return None
    spelled = dotted_name(base.value) or ""
    if spelled.count(".") != qualified.count(".") or spelled.partition(".")[2] != qualified.partition(".")[2]:
        return None  # not `<torch>.cuda.amp.GradScaler` (an imported module or class): the import would change too
    own = {id(statement) for statement in _class_body(cls) if isinstance(statement, cst.FunctionDef)}
    if not any(isinstance(s, cst.FunctionDef) and s.name.value == "__init__" for s in _class_body(cls)):
        return None
    builder = FixBuilder(model.module)
    new_base = cst.Attribute(value=cst.Attribute(value=cst.Name(head.value), attr=cst.Name("amp")), attr=cst.Name(modern))
    builder.replace(base.value, lambda updated: new_base)
    device_string = cst.SimpleString(builder.string(device))
    for site in model.call_sites:
        if id(site.scope.node) not in own or not _is_super_init(site.call):
            continue

        def add_device(updated: cst.Call) -> cst.Call:
            first = cst.Arg(value=device_string)
            if updated.args:
                first = first.with_changes(comma=_separator(updated.args))
            return updated.with_changes(args=(first, *updated.args))

        builder.replace(site.call, add_device)
    return builder.build(f"Subclass `{head.value}.amp.{modern}` and pass {device!r} to `super().__init__`", Applicability.SAFE)


def _class_body(cls: cst.ClassDef):
    return cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()


def _is_super_init(call: cst.Call) -> bool:
    """`super().__init__(...)` or `super(S, self).__init__(...)`."""
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value == "__init__"
        and isinstance(func.value, cst.Call)
        and isinstance(func.value.func, cst.Name)
        and func.value.func.value == "super"
    )
