"""The rule API.

A rule is one small class: its code, name, one-line summary, severity, whether it is on by default, the
safety of its fix, its documentation (the class docstring, in Ruff's sections) and its own valid and
invalid examples, which are at once its documentation and its tests. `check` is a predicate over the
file's `FileModel`; it never walks the syntax tree itself.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import ClassVar, Iterable, Optional, Sequence, Tuple

import libcst as cst

from amp_lint.diagnostics import Applicability, Confidence, Severity, one_line
from amp_lint.analysis.file_model import FileModel
from amp_lint.fixes.types import Fix, Import, Replacement  # noqa: F401  (re-exported for rules)

@dataclass(eq=False)
class Finding:
    rule: type
    node: cst.CSTNode  # where the diagnostic points
    message: str
    fix: Optional[Fix] = None
    confidence: Confidence = Confidence.HIGH
    context: str = ""  # the enclosing function's qualified name
    # The path the analysis followed, shown after the message with line numbers:
    # (("scaler created", <node>), ("called from the loop through `self.step()`", <node>)).
    related: Tuple[Tuple[str, cst.CSTNode], ...] = ()
    # What the finding rests on, when it is not proved ("assumes `if use_amp` can be false"): such a
    # finding has medium confidence, is reported only with `--show-assumed`, and its fix is not safe.
    assumption: Optional[str] = None
    # A finding less severe than its rule's default (AMP013's per-epoch scaler is a warning).
    severity: Optional[Severity] = None

    def __post_init__(self) -> None:
        if self.assumption:
            self.confidence = Confidence.MEDIUM


def _short(node: cst.CSTNode) -> str:
    text = one_line(cst.Module([]).code_for_node(node))
    return text if len(text) <= 50 else text[:47] + "..."


@dataclass(frozen=True)
class Invalid:
    """An example that must produce the rule's finding, with the expected code after `--fix` if it has one."""

    code: str
    fixed: Optional[str] = None
    # How many findings of this rule the example has.
    count: int = 1


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    severity: ClassVar[Severity] = Severity.WARNING
    default_enabled: ClassVar[bool] = True
    # Preview (Ruff's term): a new rule, not yet proved on real code, runs only with `--preview` /
    # `preview = true`, whatever selects it; `preview_fix`: the rule is stable, its fix runs only in preview.
    preview: ClassVar[bool] = False
    preview_fix: ClassVar[bool] = False
    # The fix's safety, or None when the rule offers no fix.
    fix_applicability: ClassVar[Optional[Applicability]] = None
    # A display-only fix (Ruff's term): the message names the change, `--fix` never applies it.
    suggestion: ClassVar[bool] = False
    # Identifier patterns (regular expressions) a file must contain, all of them, for the rule to fire
    # there: the prefilter skips files that lack them. Must hold for every invalid example (tested).
    needs: ClassVar[Tuple[str, ...]] = ()
    # Stricter patterns for the prefilter's second step, over identifiers plus the facts it notes about
    # autocast calls (`autocast_device_missing`, ...; see amp_lint.parse.prefilter). Default: `needs`.
    ast_needs: ClassVar[Tuple[str, ...]] = ()
    valid: ClassVar[Sequence[str]] = ()
    invalid: ClassVar[Sequence[Invalid]] = ()
    # An order rule: the GradScaler protocol's predicates it reports (`amp_lint.analysis.protocol`).
    predicates: ClassVar[Tuple[object, ...]] = ()

    def __init__(self, options: Optional[dict] = None) -> None:
        self.options = options or {}
        # Set by the checker for each file: its name as shown (relative to the working folder, or absolute),
        # and the side files the rule read for it (`read_side_file`), which the result cache then depends on.
        self.filename: Optional[str] = None
        self.files_read: list = []

    def read_side_file(self, relative: str, limit: int = 1 << 20) -> Optional[str]:
        """The text of a project file a literal in the checked file names (`config="ds_config.json"`), looked up
        beside the checked file, then in the working folder; None when absent, not a regular file, larger than
        `limit` bytes, or unreadable. Never follows into a FIFO or a device."""
        import os
        import stat

        folders = [os.path.dirname(os.path.abspath(self.filename))] if self.filename else []
        folders.append(os.getcwd())
        for folder in folders:
            path = os.path.join(folder, relative)
            try:
                if not stat.S_ISREG(os.stat(path).st_mode) or os.path.getsize(path) > limit:
                    continue
                with open(path, "rb") as handle:
                    text = handle.read(limit + 1)
            except (OSError, ValueError):
                continue
            self.files_read.append(path)
            return text.decode("utf-8", errors="replace") if len(text) <= limit else None
        return None

    def check(self, model: FileModel) -> Iterable[Finding]:  # pragma: no cover - abstract
        raise NotImplementedError

    def finding(self, node: cst.CSTNode, message: str, **kwargs) -> Finding:
        return Finding(rule=type(self), node=node, message=message, **kwargs)

    @staticmethod
    def through_helpers(event) -> Tuple[Tuple[str, cst.CSTNode], ...]:
        """The helper calls an inlined event was reached through, as `related` entries."""
        return tuple((f"reached through `{_short(call.call)}`", call.call) for call in event.trail())

    # --- documentation ---
    @classmethod
    def explanation(cls) -> str:
        """The rule's documentation in Markdown: What it does, Why is this bad?, Example, Use instead, ..."""
        text = textwrap.dedent(cls.__doc__ or "").strip()
        if cls.predicates:
            text += "\n\n## Protocol predicates\nWhat this rule reports, as \"event while state\" over the GradScaler protocol "
            text += "(`amp_lint.analysis.protocol.PREDICATES`):\n\n" + "\n".join(f"- {p.describe()}" for p in cls.predicates)  # type: ignore[attr-defined]
        return text

    @classmethod
    def explanation_section(cls, title: str) -> str:
        match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", cls.explanation(), re.M | re.S)
        return match.group(1).strip() if match else ""

    @classmethod
    def fix_label(cls) -> str:
        if cls.fix_applicability:
            return cls.fix_applicability.value
        return "suggestion" if cls.suggestion else "none"
