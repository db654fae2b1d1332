from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.syntax import code_of
from amp_lint.diagnostics import Severity
from amp_lint.files.torch_version import supports
from amp_lint.rules._helpers import same_binding, short
from amp_lint.rules.base import Finding, Invalid, Rule

_COMPILE = frozenset({"torch.compile"})


class CompileBackwardAutocast(Rule):
    """
    ## What it does
    Finds a model compiled with `torch.compile` that is called inside an autocast region while the
    backward runs outside it (the documented AMP recipe), in a file that never sets
    `torch._functorch.config.backward_pass_autocast`.

    ## Why is this bad?
    The default `backward_pass_autocast = "same_as_forward"` makes the compiled backward run under the
    autocast state of the forward, as if the backward were inside the `with`; torch's own comment on the
    setting says an incorrect assumption "may lead to silent incorrectness". Reproduced with
    `backend="aot_eager"`: under the default, gradients were bit-identical to eager
    backward-inside-autocast; with `"off"`, to eager backward-outside (the AMP recipe).

    ## Example
    ```python
    model = torch.compile(model)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    ```

    ## Use instead
    ```python
    torch._functorch.config.backward_pass_autocast = "off"
    model = torch.compile(model)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    ```

    ## Fix safety
    A suggestion only (Ruff's "display-only" fix): the message names the line to add, and `--fix` never
    applies it, because it changes the gradients the compiled model computes (to what eager AMP computes).
    Off by default (info): the setting is new and private (`torch._functorch.config`).

    ## Torch versions
    The message follows the torch the project targets (`target-torch`, or its own torch requirement):
    - torch 2.9 to 2.13: the setting exists (added by pytorch/pytorch#156356) with the default
      `"same_as_forward"` (read in torch 2.13's `torch/_functorch/config.py`). PyTorch is deprecating that
      default (pytorch/pytorch#177286: a FutureWarning when autocast is active at compile time and the
      setting is not set) and moving it to `"off"` (pytorch/pytorch#177287, "BC-breaking": the backward of a
      compiled region no longer inherits the forward's autocast). Write `"off"` for the eager AMP behaviour,
      or `"same_as_forward"` to keep the present one explicitly.
    - a target below 2.9: the setting does not exist there; the compiled backward always inherits the
      forward's autocast. The message says so, and to set the value only where the attribute exists.

    ## References
    - `torch/_functorch/config.py` (torch 2.13): `backward_pass_autocast = "same_as_forward"` and its comment
    - pytorch/pytorch#156356 (the setting), #177286 (deprecating its default), #177287 (default `"off"`),
      #153044 (silent gradient overflow with the old default)
    - [Automatic Mixed Precision package](https://docs.pytorch.org/docs/stable/amp.html) (the warning about
      `torch.compile` and autocast in the backward)
    - `../shared/amp-reference/rules.md` AMP003 (E6)
    """

    code = "AMP003"
    name = "compile-backward-autocast"
    summary = "torch.compile + autocast with the backward outside it and the default backward_pass_autocast"
    severity = Severity.INFO
    default_enabled = False
    suggestion = True
    needs = (r"\bautocast\b", r"\bcompile\b", r"\bbackward\b")  # the rarest word first: the prefilter stops there

    valid = [
        """
import torch
torch._functorch.config.backward_pass_autocast = "off"
model = torch.compile(model)
with torch.autocast("cuda"):
    loss = model(x).sum()
loss.backward()
""",
        # Not compiled.
        """
import torch
with torch.autocast("cuda"):
    loss = model(x).sum()
loss.backward()
""",
    ]
    invalid = [
        Invalid(
            """
import torch
model = torch.compile(model)
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(x).sum()
scaler.scale(loss).backward()
"""
        ),
        Invalid(
            """
import torch
class Trainer:
    def __init__(self, net):
        self.model = net
        self.model.compile()

    def step(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.model(x).sum()
        loss.backward()
"""
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        compiled = list(_compiled(model))
        if not compiled:
            return
        backward = next((s for s in model.call_sites if s.method == "backward" and s.in_enabled_autocast() is None), None)
        if backward is None or "backward_pass_autocast" in code_of(model.module):
            return
        for key, compile_site in compiled:
            for site in model.call_sites:
                if site.func != key or site.in_enabled_autocast() is None:
                    continue
                if not same_binding(model, key, compile_site.scope, site.scope):
                    continue
                yield self.finding(
                    compile_site.call,
                    f"`{key}` is compiled and runs under autocast, and `{short(backward.call, 40)}` is outside it: "
                    + what_torch_does(self.options.get("target_torch")),
                    context=compile_site.scope.name,
                )
                break


def _compiled(model: FileModel) -> Iterator:
    by_value = {id(a.value): a for a in model.assignment_sites}
    for site in model.call_sites:
        if site.qualified_name in _COMPILE and id(site.call) in by_value:
            yield by_value[id(site.call)].target, site  # model = torch.compile(model)
        elif site.method == "compile" and site.receiver is not None and isinstance(site.small_statement, cst.Expr):
            key = dotted_name(site.receiver)
            if key is not None and site.qualified_name is None:
                yield key, site  # model.compile(): nn.Module.compile, in place


# torch/_functorch/config.py: `backward_pass_autocast` is new in 2.9 (pytorch/pytorch#156356); 2.13 keeps the default
# "same_as_forward"; pytorch/pytorch#177286 deprecates relying on it and #177287 makes "off" the default.
_SETTING_SINCE = "2.9"


def what_torch_does(target: Optional[str]) -> str:
    """The message's second half: what the targeted torch does with the compiled backward, and what to write
    for each behaviour."""
    if target is not None and not supports(target, _SETTING_SINCE):
        return (
            f"on torch {target} (the oldest this project supports) the compiled backward always runs under the "
            "forward's autocast and cannot be told otherwise; from torch 2.9 on, "
            '`torch._functorch.config.backward_pass_autocast = "off"` gives the eager AMP behaviour (the backward '
            'outside autocast) and `= "same_as_forward"` keeps this one; set it only where it exists '
            '(`if hasattr(torch._functorch.config, "backward_pass_autocast")`)'
        )
    return (
        "by default (\"same_as_forward\", torch 2.9 to 2.13) the compiled backward runs under the forward's autocast, "
        "and PyTorch is moving the default to \"off\" (the backward outside autocast, as in eager); suggestion: write "
        '`torch._functorch.config.backward_pass_autocast = "off"` before compiling for the eager AMP behaviour, or '
        '`= "same_as_forward"` to keep today\'s behaviour once the default changes'
    )
