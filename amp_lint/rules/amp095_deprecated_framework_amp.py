from __future__ import annotations

from typing import Dict, Iterator, NamedTuple, Optional, Tuple

import libcst as cst

from amp_lint.analysis.file_model import CallSite, FileModel
from amp_lint.analysis.names import dotted_name
from amp_lint.diagnostics import Applicability, Severity
from amp_lint.files.torch_version import parse_version
from amp_lint.fixes.builder import FixBuilder
from amp_lint.rules._helpers import argument, literal_string, short
from amp_lint.rules._version_shims import in_old_torch_branch
from amp_lint.rules.base import Finding, Fix, Invalid, Rule


class Rename(NamedTuple):
    """A deprecated name of another package's mixed-precision API and what replaces it."""

    new: str  # the new name, in the same module
    package: str  # the distribution whose requirement decides (`transformer-engine`, `accelerate`)
    since: str  # the first release of `package` with the new name
    keywords: Tuple[Tuple[str, str], ...] = ()  # renamed keyword parameters (old, new)
    # The keyword that must be a literal among these for the new name to be a drop-in, and is dropped.
    selector: Optional[Tuple[str, Tuple[str, ...]]] = None


_TE_AUTOCAST = Rename("autocast", "transformer-engine", "2.9", (("fp8_recipe", "recipe"), ("fp8_group", "amax_reduction_group")))
_TE_MODEL_INIT = Rename("quantized_model_init", "transformer-engine", "2.9")
_ACCELERATE_FP8 = Rename("TERecipeKwargs", "accelerate", "1.4", selector=("backend", ("te", "TE")))

# Data, not code: qualified name -> the rename, as the packages' own deprecation warnings name them.
DEPRECATED_FRAMEWORK_NAMES: Dict[str, Rename] = {
    "transformer_engine.pytorch.fp8_autocast": _TE_AUTOCAST,
    "transformer_engine.pytorch.quantization.fp8_autocast": _TE_AUTOCAST,
    "transformer_engine.pytorch.fp8_model_init": _TE_MODEL_INIT,
    "transformer_engine.pytorch.quantization.fp8_model_init": _TE_MODEL_INIT,
    "accelerate.utils.FP8RecipeKwargs": _ACCELERATE_FP8,
    "accelerate.utils.dataclasses.FP8RecipeKwargs": _ACCELERATE_FP8,
}


class DeprecatedFrameworkAmp(Rule):
    """
    ## What it does
    Finds the deprecated mixed-precision names of Transformer Engine and Accelerate:
    `transformer_engine.pytorch.fp8_autocast` (now `autocast`), `fp8_model_init` (now
    `quantized_model_init`) and `accelerate.utils.FP8RecipeKwargs` (now `TERecipeKwargs`,
    `MSAMPRecipeKwargs` or `AORecipeKwargs`, one class per FP8 backend).

    ## Why is this bad?
    Each warns on every call and is to be removed. Transformer Engine 2.9 generalised its quantization
    API beyond FP8 (NVFP4, MXFP8): `fp8_autocast(enabled, calibrating, fp8_recipe, fp8_group, _graph)` is
    now a wrapper that warns ``fp8_autocast is deprecated and will be removed in a future release. Use
    autocast(enabled=..., calibrating=..., recipe=..., group=..., _graph=...) instead.`` and calls
    `autocast(..., recipe=fp8_recipe, amax_reduction_group=fp8_group)`; `fp8_model_init` likewise calls
    `quantized_model_init` with the same parameters. Accelerate's `FP8RecipeKwargs` warns
    ``FP8RecipeKwargs is deprecated and will be removed in Accelerate v2.0.0``.

    ## Example
    ```python
    import transformer_engine.pytorch as te
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        out = model(x)
    kwargs = FP8RecipeKwargs(backend="te", fp8_format="HYBRID")
    ```

    ## Use instead
    ```python
    import transformer_engine.pytorch as te
    with te.autocast(enabled=True, recipe=recipe):
        out = model(x)
    kwargs = TERecipeKwargs(fp8_format="HYBRID")
    ```

    ## Fix safety
    Safe where the new name is a drop-in, spelled through the module (`te.fp8_autocast(...)`,
    `accelerate.utils.FP8RecipeKwargs(...)`): the name is replaced and the renamed keywords with it
    (`fp8_recipe=` becomes `recipe=`, `fp8_group=` `amax_reduction_group=`; the positional order is the same).
    `FP8RecipeKwargs` is fixed only with a literal `backend="te"` and keyword arguments (the backend is
    dropped; with no backend it depends on whether MS-AMP is installed). A name imported by itself
    (`from transformer_engine.pytorch import fp8_autocast`) is reported without a fix: its import would
    change too.

    ## Versions
    The replacements need Transformer Engine 2.9 (NVIDIA/TransformerEngine#2256, "Generalize quantization
    APIs for FP8/FP4/.. recipes", in the v2.9 release notes' "recipe agnostic functions and APIs") and
    Accelerate 1.4 (huggingface/accelerate#3348, which split the FP8 kwargs per backend). As `target-torch`
    does for torch, the project's own requirement decides: with `transformer-engine>=2.8` or
    `accelerate>=1.3` in `[project].dependencies` or a `requirements*.txt`, that package's names are not
    reported. Fallbacks for old releases (the other side of a version test, an `except` branch) are left
    alone.

    ## Preview
    A new rule (issue 30): it runs only with `--preview` (or `preview = true`).

    ## References
    - `transformer_engine/pytorch/quantization.py`: `fp8_autocast`, `autocast`, `fp8_model_init`,
      `quantized_model_init`; [Transformer Engine v2.9 release notes](https://github.com/NVIDIA/TransformerEngine/releases/tag/v2.9)
    - `accelerate/utils/dataclasses.py` (accelerate 1.15): `FP8RecipeKwargs`, `TERecipeKwargs`, `MSAMPRecipeKwargs`
    """

    code = "AMP095"
    name = "deprecated-framework-amp-name"
    summary = "Deprecated Transformer Engine / Accelerate mixed-precision name (fp8_autocast, fp8_model_init, FP8RecipeKwargs)"
    severity = Severity.WARNING
    fix_applicability = Applicability.SAFE
    preview = True
    needs = (r"\bfp8_autocast\b|\bfp8_model_init\b|\bFP8RecipeKwargs\b",)

    valid = [
        """
import transformer_engine.pytorch as te
with te.autocast(enabled=True, recipe=recipe):
    out = model(x)
""",
        # A fallback for Transformer Engine before 2.9.
        """
import transformer_engine.pytorch as te
if te_version >= Version("2.9"):
    ctx = te.autocast(enabled=True, recipe=recipe)
else:
    ctx = te.fp8_autocast(enabled=True, fp8_recipe=recipe)
""",
        # Another package's function of the same name.
        """
from my_project.fp8 import fp8_autocast
with fp8_autocast(enabled=True):
    out = model(x)
""",
    ]
    invalid = [
        Invalid(
            """
import transformer_engine.pytorch as te
with te.fp8_autocast(enabled=True, fp8_recipe=recipe, fp8_group=group):
    out = model(x)
""",
            fixed="""
import transformer_engine.pytorch as te
with te.autocast(enabled=True, recipe=recipe, amax_reduction_group=group):
    out = model(x)
""",
        ),
        Invalid(
            """
import transformer_engine.pytorch as te
with te.fp8_model_init(enabled=True, recipe=recipe):
    model = te.Linear(1024, 1024)
""",
            fixed="""
import transformer_engine.pytorch as te
with te.quantized_model_init(enabled=True, recipe=recipe):
    model = te.Linear(1024, 1024)
""",
        ),
        # Imported by name: reported, not fixed (the import would change too).
        Invalid(
            """
from transformer_engine.pytorch import fp8_autocast
with fp8_autocast(enabled=True):
    out = model(x)
""",
        ),
        Invalid(
            """
import accelerate
kwargs = accelerate.utils.FP8RecipeKwargs(backend="te", fp8_format="HYBRID")
""",
            fixed="""
import accelerate
kwargs = accelerate.utils.TERecipeKwargs(fp8_format="HYBRID")
""",
        ),
        # The backend depends on what is installed: no drop-in.
        Invalid(
            """
from accelerate.utils import FP8RecipeKwargs
kwargs = FP8RecipeKwargs(fp8_format="HYBRID")
""",
        ),
    ]

    def check(self, model: FileModel) -> Iterator[Finding]:
        floors = dict(self.options.get("target_packages") or ())
        for site in model.call_sites:
            rename = DEPRECATED_FRAMEWORK_NAMES.get(site.qualified_name or "")
            if rename is None or not _supported(floors.get(rename.package), rename.since):
                continue
            if in_old_torch_branch(model, site.call):  # a fallback for older releases of the package
                continue
            old = site.qualified_name.rsplit(".", 1)[1]
            yield self.finding(
                site.call,
                f"`{short(site.call, 50)}`: `{old}` is deprecated since {rename.package} {rename.since}; "
                f"use `{rename.new}`" + (f" ({', '.join(f'{a}= becomes {b}=' for a, b in rename.keywords)})" if rename.keywords else ""),
                fix=_fix(model, site, rename),
                context=site.scope.name,
            )


def _supported(floor: Optional[str], since: str) -> bool:
    """Does every release the project allows have the replacement? No stated floor: the latest, yes."""
    if floor is None:
        return True
    have, want = parse_version(floor), parse_version(since)
    return have is None or want is None or have >= want


def _fix(model: FileModel, site: CallSite, rename: Rename) -> Optional[Fix]:
    call = site.call
    func = call.func
    if not isinstance(func, cst.Attribute) or any(arg.star for arg in call.args):
        return None  # imported by name: the import would need rewriting as well
    drop: Optional[str] = None
    if rename.selector is not None:
        keyword, accepted = rename.selector
        chosen = argument(call, None, keyword)
        if chosen is None or literal_string(chosen.value) not in accepted or any(arg.keyword is None for arg in call.args):
            return None
        drop = keyword
    renamed = dict(rename.keywords)
    builder = FixBuilder(model.module)

    def rewrite(updated: cst.Call) -> cst.Call:
        args = []
        for arg in updated.args:
            name = arg.keyword.value if arg.keyword is not None else None
            if name == drop:
                continue
            if name in renamed:
                arg = arg.with_changes(keyword=cst.Name(renamed[name]))
            args.append(arg)
        if args and drop is not None:
            args[-1] = args[-1].with_changes(comma=updated.args[-1].comma)
        return updated.with_changes(func=updated.func.with_changes(attr=cst.Name(rename.new)), args=tuple(args))

    builder.replace(call, rewrite)
    return builder.build(f"Use `{dotted_name(func.value)}.{rename.new}`", Applicability.SAFE)
