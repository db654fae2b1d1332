from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from amp_lint.diagnostics import Applicability, Location, Severity
from amp_lint.analysis.file_model import FileModel
from amp_lint.rules.base import Finding, Fix, Invalid, Rule

# `# noqa: AMP001, AMP021` (the same spelling the checker's suppression reads); bare `# noqa` has no codes.
_DIRECTIVE = re.compile(r"#\s*noqa(?::[ \t]*(?P<codes>[A-Za-z]+[0-9]+(?:[ \t]*,?[ \t]*[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
_CODE = re.compile(r"[A-Za-z]+[0-9]+")

# (row, column, end column, comment text) of one comment token.
_CommentToken = Tuple[int, int, str]


class UnusedNoqa(Rule):
    """
    ## What it does
    Finds `AMP` codes in `# noqa: ...` comments that suppress nothing: the line has no finding of that
    rule, the rule is not enabled for the file, or no rule has that code. Like Ruff's RUF100, restricted
    to amp-lint's own codes: `# noqa: E501` or a bare `# noqa` belong to other tools and are left alone.

    ## Why is this bad?
    A suppression outlives the code it was written for. Once the mistake is fixed, the comment keeps
    saying that the line is wrong on purpose, and it silently hides the next real finding of that rule
    on the same line.

    ## Example
    ```python
    scaler.step(optimizer)  # noqa: AMP021, E501
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.step(optimizer)  # noqa: E501
    scaler.update()
    ```

    ## Fix safety
    Safe: only the unused `AMP` codes are removed; the other codes of the comment, and any text after
    it, stay. A comment that was nothing but the directive is removed with its leading spaces.

    ## References
    - Ruff's `unused-noqa` (RUF100), https://docs.astral.sh/ruff/rules/unused-noqa/
    - Keep Ruff's RUF100 from removing amp-lint's codes: `lint.external = ["AMP"]` (README, pre-commit).
    """

    code = "AMP900"
    name = "unused-noqa"
    summary = "`# noqa: AMP...` code that suppresses nothing"
    severity = Severity.INFO
    default_enabled = False  # as Ruff's RUF100: opt in
    fix_applicability = Applicability.SAFE
    needs = ()  # its findings are in comments, which the prefilter does not see
    valid = [
        "import torch\nx = 1  # noqa: E501\n",
        "import torch\nx = 1  # noqa\n",
        'text = "# noqa: AMP001"\n',
    ]
    invalid = [
        Invalid("import torch\nx = 1  # noqa: AMP001\n", fixed="import torch\nx = 1\n"),
        Invalid("import torch\nx = 1  # noqa: E501, AMP021\n", fixed="import torch\nx = 1  # noqa: E501\n"),
        Invalid("import torch\nx = 1  # noqa: AMP999  # see issue 3\n", fixed="import torch\nx = 1  # see issue 3\n"),
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        return ()  # the checker calls `unused` once the other rules' suppressions are known

    @classmethod
    def unused(
        cls,
        module: cst.Module,
        code: str,
        used: Set[Tuple[int, str]],
        enabled: FrozenSet[str],
        known: FrozenSet[str],
    ) -> List[Tuple[Finding, Tuple[Location, Location]]]:
        """Findings (with their positions) for the AMP codes of `# noqa` comments that suppressed nothing.

        `used` holds (row, code) for every finding a `# noqa` on that row suppressed.
        """
        tokens = _comment_tokens(code)
        if not tokens:
            return []
        nodes = _comment_nodes(module)
        # Tokens and nodes are the same comments in the same order; if not (never seen), no fix is offered.
        paired = len(nodes) == len(tokens) and all(node.value == text for (node, _), (_, _, text) in zip(nodes, tokens))
        results = []
        for position, (row, column, text) in enumerate(tokens):
            directive = _DIRECTIVE.search(text)
            if directive is None or directive.group("codes") is None:
                continue
            listed = _CODE.findall(directive.group("codes"))
            unused = []
            for listed_code in listed:
                upper = listed_code.upper()
                if not upper.startswith("AMP"):
                    continue  # another tool's code
                if upper not in known:
                    unused.append((listed_code, "unknown"))
                elif upper not in enabled:
                    unused.append((listed_code, "non-enabled"))
                elif (row, upper) not in used:
                    unused.append((listed_code, "unused"))
            if not unused:
                continue
            described = "; ".join(
                f"{reason}: {', '.join(f'`{c}`' for c, r in unused if r == reason)}"
                for reason in ("unused", "non-enabled", "unknown")
                if any(r == reason for _, r in unused)
            )
            node, parent = nodes[position] if paired else (None, None)
            fix = _removal_fix(node, parent, directive, listed, {c for c, _ in unused}) if node is not None else None
            finding = Finding(rule=cls, node=node or module, message=f"Unused `noqa` directive ({described})", fix=fix)
            start = Location(row, column + 1 + directive.start())
            end = Location(row, column + 1 + directive.end())
            results.append((finding, (start, end)))
        return results


def _comment_tokens(code: str) -> List[_CommentToken]:
    try:
        return [
            (token.start[0], token.start[1], token.string)
            for token in tokenize.generate_tokens(io.StringIO(code).readline)
            if token.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []


def _comment_nodes(module: cst.Module) -> List[Tuple[cst.Comment, Optional[cst.CSTNode]]]:
    """Every comment of the module in source order, with the node that holds it."""
    found: List[Tuple[cst.Comment, Optional[cst.CSTNode]]] = []

    class Collect(cst.CSTVisitor):
        def __init__(self) -> None:
            self.stack: List[cst.CSTNode] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, cst.Comment):
                found.append((node, self.stack[-1] if self.stack else None))
            self.stack.append(node)
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            self.stack.pop()

    module.visit(Collect())
    return found


def _removal_fix(
    node: cst.Comment, parent: Optional[cst.CSTNode], directive: "re.Match", listed: Sequence[str], unused: Set[str]
) -> Optional[Fix]:
    text = node.value
    kept = [c for c in listed if c not in unused]
    if kept:
        codes = directive.span("codes")
        new_text = text[: codes[0]] + ", ".join(kept) + text[codes[1] :]
        return Fix(f"Remove the unused code{'s' if len(unused) > 1 else ''}", Applicability.SAFE, {node: lambda n: n.with_changes(value=new_text)})
    before = text[: directive.start()].rstrip()
    after = text[directive.end() :].strip()
    if before and before != "#":
        new_text = before
    elif after.startswith("#"):
        new_text = after
    elif after:
        new_text = "# " + after
    else:
        new_text = ""
    message = "Remove the unused `noqa` directive"
    if new_text:
        return Fix(message, Applicability.SAFE, {node: lambda n: n.with_changes(value=new_text)})
    if isinstance(parent, cst.TrailingWhitespace):
        return Fix(
            message,
            Applicability.SAFE,
            {parent: lambda n: n.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)},
        )
    if isinstance(parent, cst.EmptyLine):
        return Fix(message, Applicability.SAFE, {parent: lambda n: cst.RemoveFromParent()})
    return None
