from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amp_lint.analysis import names
from amp_lint.analysis.events import AutocastRegion
from amp_lint.analysis.file_model import FileModel
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.fixes.builder import FixBuilder, keyword_arg
from amp_lint.rules._helpers import argument, has_star_args, literal_bool, short
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

_GRAPHED = frozenset({"torch.cuda.make_graphed_callables", "torch.cuda.graphs.make_graphed_callables"})


class GraphedCallablesAutocastCache(Rule):
    """
    ## What it does
    Finds `torch.cuda.make_graphed_callables(...)` called inside a CUDA autocast region that keeps the
    autocast weight cache (the default `cache_enabled=True`).

    ## Why is this bad?
    Graph capture cannot use autocast's cast cache; `make_graphed_callables` checks it first and raises
    `RuntimeError: make_graphed_callables does not support the autocast caching. Please set
    `cache_enabled=False`.` The cache only saves re-casting the weights, so turning it off costs a little
    speed and changes no result.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        model = torch.cuda.make_graphed_callables(model, (sample,))
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
        model = torch.cuda.make_graphed_callables(model, (sample,))
    ```

    ## Fix safety
    Safe: `cache_enabled=False` is added to the autocast call (the cache affects speed only). No fix for
    an autocast made elsewhere (a decorator without arguments) or called with `*args`. Only the
    `with` that lexically holds the call is checked: CUDA autocast only (the check reads
    `torch.is_autocast_enabled()`, which means CUDA), and not when `cache_enabled` is an expression.

    ## References
    - `torch/cuda/graphs.py` (torch 2.13): `make_graphed_callables` ("The context manager
      `torch.cuda.amp.autocast()` must have `cache_enabled=False`") and its `RuntimeError`
    - [CUDA Graphs: `make_graphed_callables`](https://docs.pytorch.org/docs/stable/generated/torch.cuda.make_graphed_callables.html)
    """

    code = "AMP055"
    name = "graphed-callables-autocast-cache"
    summary = "make_graphed_callables under an autocast that keeps its cache (RuntimeError; needs cache_enabled=False)"
    severity = Severity.ERROR
    fix_applicability = Applicability.SAFE
    needs = (r"\bautocast\b", r"\bmake_graphed_callables\b")  # a word other rules need first: scanned once

    valid = [
        """
import torch
with torch.autocast("cuda", cache_enabled=False):
    model = torch.cuda.make_graphed_callables(model, (x,))
""",
        """
import torch
model = torch.cuda.make_graphed_callables(model, (x,))
with torch.autocast("cuda"):
    out = model(x)
""",
        # CPU autocast: the check reads CUDA's state only.
        """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    model = torch.cuda.make_graphed_callables(model, (x,))
""",
        """
import torch
with torch.autocast("cuda", cache_enabled=use_cache):
    model = torch.cuda.make_graphed_callables(model, (x,))
""",
    ]
    invalid = [
        Invalid(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    model = torch.cuda.make_graphed_callables(model, (x,))
""",
            fixed="""
import torch
with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
    model = torch.cuda.make_graphed_callables(model, (x,))
""",
        ),
        Invalid(
            """
from torch.cuda import make_graphed_callables
from torch.cuda.amp import autocast
with autocast():
    step = make_graphed_callables(step, (x,))
""",
            fixed="""
from torch.cuda import make_graphed_callables
from torch.cuda.amp import autocast
with autocast(cache_enabled=False):
    step = make_graphed_callables(step, (x,))
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        for site in model.call_sites:
            if site.qualified_name not in _GRAPHED:
                continue
            region = site.in_enabled_autocast()
            if region is None or region.spec.device != "cuda":
                continue
            caching = _cache_enabled(region)
            if caching is not True:
                continue
            yield self.finding(
                site.call,
                f"`{short(site.call, 40)}` runs under `{short(region.spec.call or region.node, 40)}`, which keeps the "
                "autocast cache: RuntimeError: make_graphed_callables does not support the autocast caching; "
                "pass cache_enabled=False",
                fix=_fix(model, region),
                context=site.scope.name,
                related=(("autocast entered here", region.spec.call or region.node),),
            )


def _position(region: AutocastRegion) -> int:
    return 2 if region.spec.qualified_name in names.IMPLIED_DEVICE else 3


def _cache_enabled(region: AutocastRegion) -> Optional[bool]:
    """True: the default or a literal True; False: a literal False; None: an expression, or unknown."""
    call = region.spec.call
    if call is None:
        return True
    if has_star_args(call):
        return None
    arg = argument(call, _position(region), "cache_enabled")
    if arg is None:
        return True
    value = arg.value
    if isinstance(value, cst.Name) and value.value == "None":
        return True  # None: torch.is_autocast_cache_enabled(), on by default
    return literal_bool(value)


def _fix(model: FileModel, region: AutocastRegion) -> Optional[Fix]:
    call = region.spec.call
    if call is None or has_star_args(call) or argument(call, _position(region), "cache_enabled") is not None:
        return None
    builder = FixBuilder(model.module)

    def add_keyword(updated: cst.Call) -> cst.Call:
        args = list(updated.args)
        new = keyword_arg("cache_enabled", cst.Name("False"))
        if args:
            last = args[-1]
            if not isinstance(last.comma, cst.Comma):
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            else:  # a trailing comma: the new argument takes it, the old last one takes the separator
                new = new.with_changes(comma=last.comma)
                separator = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else None
                args[-1] = last.with_changes(comma=separator or cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return updated.with_changes(args=tuple(args + [new]))

    builder.replace(call, add_keyword)
    return builder.build("Pass `cache_enabled=False` to the autocast", Applicability.SAFE)
