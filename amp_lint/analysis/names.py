"""Which expressions mean torch's AMP API, whatever the spelling.

`NameTable` maps local names bound by imports to fully qualified names, per scope, so that
`import torch as T; T.autocast`, `from torch.cuda.amp import autocast as ac` and
`from torch.cuda import amp; amp.GradScaler` all resolve once, for every rule. A name that the file
binds itself (a `def autocast`, a class called `GradScaler`) is the user's, not torch's.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

# --- torch's AMP API by qualified name -------------------------------------------------------------

AUTOCAST = frozenset(
    {
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast",
        "torch.cuda.amp.autocast_mode.autocast",
        "torch.cpu.amp.autocast",
        "torch.cpu.amp.autocast_mode.autocast",
    }
)

GRAD_SCALER = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.cpu.amp.grad_scaler.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
        "torch.distributed.fsdp.ShardedGradScaler",
    }
)

CUSTOM_FWD = frozenset({"torch.amp.custom_fwd", "torch.cuda.amp.custom_fwd", "torch.amp.autocast_mode.custom_fwd"})
CUSTOM_BWD = frozenset({"torch.amp.custom_bwd", "torch.cuda.amp.custom_bwd", "torch.amp.autocast_mode.custom_bwd"})

CLIP_GRAD = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grads_with_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_value_",
        "torch.nn.utils.clip_grad.clip_grads_with_norm_",
    }
)

AUTOGRAD_BACKWARD = frozenset({"torch.autograd.backward"})
AUTOGRAD_GRAD = frozenset({"torch.autograd.grad"})

FLOAT16 = frozenset({"torch.float16", "torch.half"})
BFLOAT16 = frozenset({"torch.bfloat16"})
OTHER_FLOAT = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double"})

# Deprecated device-specific spellings (AMP070-AMP073): qualified name -> (device, modern name).
DEPRECATED_AMP = {
    "torch.cuda.amp.autocast": ("cuda", "autocast"),
    "torch.cuda.amp.autocast_mode.autocast": ("cuda", "autocast"),
    "torch.cpu.amp.autocast": ("cpu", "autocast"),
    "torch.cpu.amp.autocast_mode.autocast": ("cpu", "autocast"),
    "torch.cuda.amp.GradScaler": ("cuda", "GradScaler"),
    "torch.cuda.amp.grad_scaler.GradScaler": ("cuda", "GradScaler"),
    "torch.cpu.amp.GradScaler": ("cpu", "GradScaler"),
    "torch.cpu.amp.grad_scaler.GradScaler": ("cpu", "GradScaler"),
    "torch.cuda.amp.custom_fwd": ("cuda", "custom_fwd"),
    "torch.cuda.amp.custom_bwd": ("cuda", "custom_bwd"),
}

DEPRECATED_AMP_MODULES = frozenset(
    {
        "torch.cuda.amp",
        "torch.cpu.amp",
        "torch.cuda.amp.autocast_mode",
        "torch.cpu.amp.autocast_mode",
        "torch.cuda.amp.grad_scaler",
        "torch.cpu.amp.grad_scaler",
    }
)

# The first torch release that has each replacement the deprecation rules and fixes suggest (for the
# `target-torch` setting). Sources: the versioned torch docs' module sources (docs.pytorch.org/2.2 has the
# whole GradScaler in torch/cuda/amp/grad_scaler.py; 2.3's subclasses torch.amp.GradScaler; 1.13's
# torch.cuda.amp.autocast subclasses torch.amp.autocast_mode.autocast), pytorch/pytorch#126531 (torch.amp
# custom_fwd/custom_bwd(device_type=...) and the device-taking `_cast`, 2.4) and #124359 (the device-generic
# autocast-state functions, 2.4).
REPLACEMENT_SINCE = {
    "autocast": "1.13",  # torch.amp.autocast(device_type, ...); torch.autocast is older (1.10)
    "GradScaler": "2.3",  # torch.amp.GradScaler(device, ...)
    "custom_fwd": "2.4",  # torch.amp.custom_fwd(device_type=...)
    "custom_bwd": "2.4",
    "autocast_state": "2.4",  # torch.get_autocast_dtype(device), torch.is_autocast_enabled(device), ...
    "_cast": "2.4",  # torch.amp.autocast_mode._cast(value, device_type, dtype)
    "OptState": "2.3",  # torch.amp.grad_scaler.OptState
}

# Private names of torch.cuda.amp that code still imports: qualified name -> (replacement, device or None).
LEGACY_PRIVATE_AMP = {
    "torch.cuda.amp.autocast_mode._cast": ("torch.amp.autocast_mode._cast", "cuda"),
    "torch.cuda.amp.grad_scaler.OptState": ("torch.amp.grad_scaler.OptState", None),
}

# Device that a spelling implies when it takes no device argument.
IMPLIED_DEVICE = {name: device for name, (device, _) in DEPRECATED_AMP.items()}


def is_optimizer_class(qualified_name: str) -> bool:
    """`torch.optim.AdamW`, `torch.optim.sgd.SGD`: yes. `torch.optim.lr_scheduler.StepLR`: no."""
    if not qualified_name.startswith("torch.optim."):
        return False
    parts = qualified_name.split(".")
    if "lr_scheduler" in parts or "swa_utils" in parts:
        return False
    last = parts[-1]
    return last[:1].isupper() and last != "Optimizer"


# What `from M import *` binds, for the torch modules whose AMP names the rules read (their `__all__`).
STAR_EXPORTS = {
    "torch": frozenset(
        {
            "autocast",
            "GradScaler",
            "get_autocast_gpu_dtype",
            "get_autocast_cpu_dtype",
            "get_autocast_dtype",
            "set_autocast_dtype",
            "set_autocast_enabled",
            "is_autocast_enabled",
            "is_autocast_cpu_enabled",
            "set_autocast_gpu_dtype",
            "set_autocast_cpu_dtype",
            "set_autocast_cpu_enabled",
            "float16",
            "half",
            "bfloat16",
            "float32",
            "float",
            "float64",
            "double",
            "device",
        }
    ),
    "torch.amp": frozenset({"autocast", "custom_bwd", "custom_fwd", "GradScaler"}),
    "torch.cuda.amp": frozenset({"autocast", "custom_bwd", "custom_fwd", "GradScaler"}),
    "torch.cpu.amp": frozenset({"autocast", "GradScaler"}),
}

# A module that a star import of an unknown module may bind: its name is conclusive.
STAR_MODULES = frozenset({"torch"})

# --- resolution --------------------------------------------------------------------------------------


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """`a.b.c` for a chain of names and attributes, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


class StarImports:
    """The `from M import *` of one scope, in order, and what they bind, kept as each is added: a lookup
    costs the same however many there are (issue 45: each of 20,000 names read every star module).

    `from torch.cuda.amp import *` binds `autocast`; so does `from torch import *`, unless another star
    import (of a module that could bind anything) may replace it. A star import of any module may bind
    `torch` only to the torch module (a file that uses `torch.autocast` and binds `torch` nowhere else
    gets it that way).
    """

    def __init__(self) -> None:
        self.modules: List[str] = []
        self.any_unknown = False  # a module whose exports are not known (`STAR_EXPORTS`): it may bind anything
        self._exported_by: Dict[str, str] = {}  # name -> the last known module that exports it

    def add(self, module: str) -> None:
        self.modules.append(module)
        exports = STAR_EXPORTS.get(module)
        if exports is None:
            self.any_unknown = True
            return
        for name in exports:
            self._exported_by[name] = module

    def binding(self, name: str) -> Optional[str]:
        """What a name bound by nothing but these star imports means, when that is conclusive."""
        if self.any_unknown and name not in STAR_MODULES:
            return None
        module = self._exported_by.get(name)
        if module is not None:
            return f"{module}.{name}"
        return name if name in STAR_MODULES else None

    def __bool__(self) -> bool:
        return bool(self.modules)


def _module_name(node: cst.BaseExpression) -> str:
    return dotted_name(node) or ""


class NameTable:
    """Local name -> qualified name for the imports of one scope, chained to the enclosing scope."""

    def __init__(self, parent: Optional["NameTable"] = None) -> None:
        self.parent = parent
        self.imported: Dict[str, str] = {}
        # Names the scope binds itself (def, class, plain assignment): they hide imports from outer scopes.
        self.own: Set[str] = set()
        # `from M import *`: the modules, in order, and what they bind.
        self.star_imports = StarImports()

    def bind_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = _module_name(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.imported[alias.asname.name.value] = full
            else:
                top = full.split(".")[0]
                self.imported[top] = top

    def bind_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative:
            module = "." * len(node.relative) + _module_name(node.module) if node.module else "."
        else:
            module = _module_name(node.module) if node.module else ""
        if isinstance(node.names, cst.ImportStar):
            self.star_imports.add(module)
            return
        for alias in node.names:
            name = _module_name(alias.name)
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.imported[local] = f"{module}.{name}" if module else name

    def bind_local(self, name: str) -> None:
        self.own.add(name)

    def lookup(self, name: str) -> Optional[str]:
        table: Optional[NameTable] = self
        while table is not None:
            if name in table.imported:
                return table.imported[name]
            if name in table.own:
                return None
            if table.star_imports:
                found = table.star_imports.binding(name)
                if found is not None:
                    return found
            table = table.parent
        return None

    def qualify(self, node: cst.BaseExpression) -> Optional[str]:
        """The qualified name an expression refers to, if it starts with an imported name."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        resolved = self.lookup(head)
        if resolved is None:
            return None
        return f"{resolved}.{rest}" if rest else resolved


def receiver_name(node: cst.BaseExpression) -> Optional[str]:
    """The dotted name a method is called on; `super()` (or `super(Cls, self)`) in a method is the instance
    itself, `self`, reached through its base's methods: `super().unscale_(opt)` in a GradScaler subclass
    runs torch's protocol on `self`."""
    dotted = dotted_name(node)
    if dotted is not None:
        return dotted
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "super":
        if not node.args or (len(node.args) == 2 and isinstance(node.args[1].value, cst.Name) and node.args[1].value.value == "self"):
            return "self"
    return None


def binds_at_module_level(table: NameTable, name: str) -> bool:
    """Does `name`, looked up from `table`, name what the module itself binds (a top-level def), no import
    or enclosing function's name hiding it?"""
    current: Optional[NameTable] = table
    while current is not None:
        if name in current.imported:
            return False
        if name in current.own:
            return current.parent is None
        current = current.parent
    return False


def plain_target_names(target: cst.BaseExpression) -> Set[str]:
    """The plain names an assignment or loop target binds: `a`, `a, (b, c)`, `*rest` (not `self.n`, `x[i]`)."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {name for element in target.elements for name in plain_target_names(element.value)}
    if isinstance(target, cst.StarredElement):
        return plain_target_names(target.value)
    return set()


def declared_type(annotation: Optional[cst.BaseExpression], table: NameTable) -> Optional[cst.BaseExpression]:
    """The one type an annotation declares: `X`, with `Optional[X]` and `X | None` read as `X`; None for no
    annotation or a union of several types."""
    if isinstance(annotation, cst.Annotation):
        annotation = annotation.annotation
    if isinstance(annotation, cst.BinaryOperation) and isinstance(annotation.operator, cst.BitOr):
        others = [s for s in (annotation.left, annotation.right) if not (isinstance(s, cst.Name) and s.value == "None")]
        return declared_type(others[0], table) if len(others) == 1 else None
    if isinstance(annotation, cst.Subscript) and len(annotation.slice) == 1:
        inner = annotation.slice[0].slice
        if (table.qualify(annotation.value) or "").rpartition(".")[2] == "Optional" and isinstance(inner, cst.Index):
            return declared_type(inner.value, table)
    return annotation
