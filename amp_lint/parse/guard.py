"""Refuse, in well under a second, the rare file that LibCST's parser would chew on for minutes.

LibCST's parser is fast on ordinary code but super-linear on long chains: measured with LibCST 1.9,
a flat sum `1+1+...` of 1,000 terms parses in 0.15 s, of 2,000 in 0.7 s, of 20,000 in many minutes.
The same holds for every shape that nests without brackets: `a.b.b...`, `f(1)(1)...`, `a[0][0]...`,
`**` chains, unary chains (`- - -x`, `not not x`), `lambda: lambda: ...` and `a if b else a if ...`.
Nesting inside brackets slows LibCST down too, but Python allows at most 200 levels of it, and flat
sequences (`and`, comparisons, lists, implicit string concatenation, `elif` chains) stay linear: only
chains need a guard.

A chain's parse time follows, within a factor of ten, its cost: the sum over its links of the size
(in `ast` expression nodes) of the expression each link extends, about n**2 for a flat chain of n
links and n times the size of a huge first operand. Per unit of cost, subscript, call and attribute
chains are the slowest (0.9, 0.7 and 0.4 us on a 2-CPU test machine), operators the fastest (0.15 us).
"""

from __future__ import annotations

import ast
import bisect
import itertools
import math
import re
import warnings
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

from amp_lint.diagnostics import FileError, Location
from amp_lint.files.lines import LINE_BREAK

# The most a chain may cost, in the units above: under 1 s of parsing for the slowest shape (a
# subscript chain of 1,000 links: 0.86 s), 0.15 s for a sum of 1,000 terms.
PARSE_COST_LIMIT = 1_000_000

# The fields through which each kind of expression continues a chain without brackets around it.
_CHAIN_FIELDS: Dict[type, Tuple[str, ...]] = {
    ast.BinOp: ("left", "right"),
    ast.UnaryOp: ("operand",),
    ast.Attribute: ("value",),
    ast.Call: ("func",),
    ast.Subscript: ("value",),
    ast.Lambda: ("body",),
    ast.IfExp: ("test", "body", "orelse"),
}

# Nodes that are not part of the code's text: `ast.Load()`, `ast.Add()` and their like.
_MARKERS = (ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)

# Each expression node takes at least one character, and a chain's links each extend a bigger
# expression than the last, so a chain of text shorter than this cannot reach the limit.
_SHORTEST_COSTLY_TEXT = math.isqrt(2 * PARSE_COST_LIMIT)

# Line breaks where a chain may go on: after an operator, a backslash or an opening bracket, or
# before an operator, a `.attribute` or a closing bracket. Joining lines there brings a chain broken
# at its operators or inside its calls and subscripts back onto one line, while the lines of plain
# multi-line calls and lists (broken after their commas) stay apart. (Two patterns, each with a
# prefix the regex engine scans for quickly, take two thirds of the time of one with both.)
_BREAK_AFTER_CHAIN_TOKEN = re.compile(r"[-+*/%@&|^<>\\(\[][ \t]*(?:#[^\n]*)?\n")
_BREAK_BEFORE_CHAIN_TOKEN = re.compile(r"\n[ \t]*[-+*/%@&|^~<>.)\]]")


@dataclass(frozen=True)
class Chain:
    """The costliest chain of a file: its cost (see the module's docstring), links and first node."""

    cost: int
    links: int
    node: Optional[ast.expr]


_NO_CHAIN = Chain(0, 0, None)
_SIMPLE_LINKS_AT_THE_LIMIT = math.isqrt(PARSE_COST_LIMIT)  # links of two nodes each, like `+ 1`


# Bracket nesting. Python's tokenizer refuses more than 200 levels ("too many nested parentheses"),
# but LibCST's parser does not: 3,000 levels take it 8.5 GB, 100,000 crash it. Within Python's limit,
# LibCST's memory grows with the square of the depth (a line of 199-deep lists: about 30 MB, and
# 200 such lines about 6 GB): the nesting cost of a file is the sum, over its opening brackets, of
# their depth beyond `_SHALLOW_DEPTH` (ordinary code never gets there).
_SHALLOW_DEPTH = 10
# About 5 lines of 199-deep lists (150 MB, a few seconds); one such line costs 18,000.
NESTING_COST_LIMIT = 100_000
# Python's limit: from this (raw) depth on, its own parser is asked first; it refuses at once.
_ASK_PYTHON_DEPTH = 200
# One statement of this many tokens takes LibCST's parser half a minute and gigabytes, however flat
# (a 1 MB list literal: 330,000 elements). Counted cheaply as the commas, colons, operators and
# brackets of the statement's text. A 25,000-row table of 3-tuples (150,000) still passes.
STATEMENT_TOKEN_LIMIT = 200_000
_BRACKETS = re.compile(r"[()\[\]{}]")
_OPENING = frozenset("([{")
_SEPARATORS = ",:+-*/%@&|^<>=.()[]{}"
# Below this many characters a statement cannot hold `STATEMENT_TOKEN_LIMIT` tokens of the above.
_SHORTEST_HUGE_STATEMENT = STATEMENT_TOKEN_LIMIT


# Memory. LibCST's tree takes about 1.5-2.1 KB per token (measured with LibCST 1.9 on training code, lines
# of short statements and a long list literal; `ast` takes 0.5-0.7 KB per token beside it), so a file's
# memory follows its token count, not its bytes: 620 MB per MB of training code, 1.5 GB per MB of
# one-line statements. A file whose estimate exceeds the budget is refused before any parse (Python's
# `ast` included: 3.45 GB for a 10 MB list literal). Tokens are estimated at C speed from the bytes (words
# and punctuation; strings and comments count too: an estimate on the safe side).
MEMORY_PER_TOKEN = 2_500
MEMORY_LIMIT = 2 * 1024**3
# Above this estimate a file checked in the main process (no workers) is checked in a process of its own:
# an out-of-memory abort in LibCST's native parser then ends that process, not the run.
ISOLATE_ABOVE = 256 * 1024**2
_WORD, _PUNCT, _SPACE = 0x61, 0x2E, 0x20
_TOKEN_CLASSES = bytes(
    _WORD if (chr(i).isalnum() or i == 0x5F or i >= 0x80) else _SPACE if chr(i).isspace() else _PUNCT for i in range(256)
)


def estimated_tokens(data: bytes) -> int:
    """About how many tokens Python reads in `data`: punctuation characters, and runs of word characters."""
    classes = data.translate(_TOKEN_CLASSES)
    return classes.count(b".") + classes.count(b" a") + classes.count(b".a") + (classes[:1] == b"a")


def estimated_memory(data: bytes) -> int:
    """About how many bytes parsing and analysing `data` takes (see `MEMORY_PER_TOKEN`)."""
    return estimated_tokens(data) * MEMORY_PER_TOKEN


def check_memory(source: str, filename: str, limit: int = MEMORY_LIMIT) -> Optional[FileError]:
    """An error to report instead of parsing `source` when its analysis would take more than `limit` bytes."""
    if len(source) * MEMORY_PER_TOKEN <= limit:  # fits even at one token per character: no need to count
        return None
    data = source.encode("utf-8", "surrogatepass")
    tokens = estimated_tokens(data)
    if tokens * MEMORY_PER_TOKEN <= limit:
        return None
    return FileError(
        filename,
        f"not analysed: about {tokens:,} tokens would take about {tokens * MEMORY_PER_TOKEN / 1024**3:.1f} GB "
        f"to parse and analyse (limit: {limit / 1024**3:.0f} GB per file; generated code or data?)",
    )


def check_parse_cost(source: str, filename: str) -> Optional[FileError]:
    """An error to report instead of parsing `source` with LibCST, or None when it parses in time.

    Most files are let through by text tests alone (bracket depth, statement and logical line
    lengths); only a file deep enough for Python's limit or with a logical line long enough to
    hold a costly chain pays for Python's own parser (about a tenth of a LibCST parse).
    """
    refusal = _check_nesting(source, filename)
    if refusal is not None:
        return refusal
    if len(source) < _SHORTEST_COSTLY_TEXT:
        return None
    longest = _longest_logical_line(source)
    if len(longest) < _SHORTEST_COSTLY_TEXT:  # no logical line long enough to hold a costly chain
        return None
    if len(longest) >= _SHORTEST_HUGE_STATEMENT:  # a 10 MB `1+1+...`: no need for `ast` to refuse it
        tokens = _separators(longest, 0, len(longest))
        if tokens > STATEMENT_TOKEN_LIMIT:
            return _too_long_statement(filename, tokens)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (RecursionError, MemoryError):
        return FileError(filename, "not analysed: an expression is nested too deeply even for Python's own parser")
    except (SyntaxError, ValueError, OverflowError):
        return None  # not Python that this interpreter reads: LibCST decides
    chain = costliest_chain(tree)
    if chain.cost <= PARSE_COST_LIMIT:
        return None
    return FileError(
        filename,
        f"not analysed: an expression with {chain.links:,} chained operations is too long for LibCST's parser "
        f"(its parse time grows with the square of the chain; limit: about {_SIMPLE_LINKS_AT_THE_LIMIT:,} simple ones)",
        _location(source, chain.node),
    )


def _check_nesting(source: str, filename: str) -> Optional[FileError]:
    """Refuse what Python's parser refuses for its nesting, deep nesting LibCST would choke on, and a
    bracketed statement too long for LibCST's parser (see `NESTING_COST_LIMIT` and `STATEMENT_TOKEN_LIMIT`).

    Brackets are counted in the raw text, strings and comments included: an estimate, cheap enough
    for every file (a regular-expression scan and C-level sums; a Python loop only over a file with
    more separators than the statement limit, or with stray closing brackets).
    """
    brackets = _BRACKETS.findall(source)
    if not brackets:
        return None
    depths = list(itertools.accumulate(map(_STEP.__getitem__, brackets)))
    if min(depths) < 0:  # a closing bracket in a string or comment: count it, but never below zero
        depths = _clamped_depths(brackets)
    deepest = max(depths)
    if deepest >= _ASK_PYTHON_DEPTH:
        refusal = _python_refusal(source, filename)
        if refusal is not None:
            return refusal
    if deepest > _SHALLOW_DEPTH:
        # Each opening bracket at depth d is matched by a closing one that leaves depth d - 1: half
        # the sum over all brackets is about the sum over the opening ones.
        depths.sort()
        deep = depths[bisect.bisect_right(depths, _SHALLOW_DEPTH) :]
        cost = (sum(deep) - _SHALLOW_DEPTH * len(deep)) // 2
        if cost > NESTING_COST_LIMIT:
            return FileError(
                filename,
                f"not analysed: brackets nested up to {deepest} deep are too costly for LibCST's parser "
                f"(its memory grows with the square of the depth; nesting cost {cost:,}, limit {NESTING_COST_LIMIT:,})",
            )
    if len(source) >= _SHORTEST_HUGE_STATEMENT and _separators(source, 0, len(source)) > STATEMENT_TOKEN_LIMIT:
        start, end = _longest_bracketed_statement(source)
        tokens = _separators(source, start, end)
        if tokens > STATEMENT_TOKEN_LIMIT:
            return _too_long_statement(filename, tokens, _location_of_offset(source, start))
    return None


_STEP = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}


def _clamped_depths(brackets: List[str]) -> List[int]:
    depths, depth = [], 0
    for bracket in brackets:
        depth = depth + 1 if bracket in _OPENING else max(depth - 1, 0)
        depths.append(depth)
    return depths


def _longest_bracketed_statement(source: str) -> Tuple[int, int]:
    """(start, end) of the longest outermost bracket group of `source` (to its end if unclosed)."""
    depth = group_start = 0
    longest = (0, 0)
    for match in _BRACKETS.finditer(source):
        if match.group() in _OPENING:
            if depth == 0:
                group_start = match.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0 and match.end() - group_start > longest[1] - longest[0]:
                longest = (group_start, match.end())
    if depth and len(source) - group_start > longest[1] - longest[0]:
        longest = (group_start, len(source))
    return longest


def _python_refusal(source: str, filename: str) -> Optional[FileError]:
    """Python's own verdict on deeply nested code: its syntax error, or None when it accepts it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, filename, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        location = Location(error.lineno, error.offset or 1) if error.lineno else None
        return FileError(filename, f"syntax error: {error.msg}", location)
    except (RecursionError, MemoryError):
        return FileError(filename, "not analysed: an expression is nested too deeply even for Python's own parser")
    except (ValueError, OverflowError):
        return None  # not Python that this interpreter reads: LibCST decides
    return None


def _separators(text: str, start: int, end: int) -> int:
    return sum(text.count(character, start, end) for character in _SEPARATORS)


def _too_long_statement(filename: str, tokens: int, location: Optional[Location] = None) -> FileError:
    return FileError(
        filename,
        f"not analysed: a statement of about {tokens:,} tokens is too long for LibCST's parser "
        f"(generated data?; limit: {STATEMENT_TOKEN_LIMIT:,})",
        location,
    )


def _location_of_offset(source: str, offset: int) -> Location:
    lines = LINE_BREAK.split(source[:offset])
    return Location(len(lines), len(lines[-1]) + 1)


def _longest_logical_line(source: str) -> str:
    """The longest line of `source` once lines are joined where a chain may go on."""
    longest_physical = max(source.split("\n"), key=len)
    if _separators(longest_physical, 0, len(longest_physical)) > STATEMENT_TOKEN_LIMIT:
        return longest_physical  # already too long: no need to join lines (seconds on 10 MB)
    if "\r" in source:
        source = LINE_BREAK.sub("\n", source)
    joined = _BREAK_BEFORE_CHAIN_TOKEN.sub(" ", _BREAK_AFTER_CHAIN_TOKEN.sub(" ", source))
    return max(joined.split("\n"), key=len)


def _may_hold_costly_chain(source: str) -> bool:
    """False when no logical line (lines joined where a chain may go on) is long enough.

    Blind to a chain whose lines all break after commas inside its calls (black's layout of a method
    chain with multi-line arguments) or at `not`, `if`/`else` and `lambda`: to take over 1 s, such
    a chain must run over some 2,000 lines (500 calls of two arguments: 0.9 s; 1,000 calls: 4 s),
    so the text test is trusted there rather than paying for `ast` on every file with multi-line calls.
    """
    return len(source) >= _SHORTEST_COSTLY_TEXT and len(_longest_logical_line(source)) >= _SHORTEST_COSTLY_TEXT


def costliest_chain(tree: ast.AST) -> Chain:
    """The chain of highest cost in `tree` (see the module's docstring)."""
    sizes: Dict[ast.AST, int] = {}  # node -> expression nodes in its subtree; dropped once its parent is done
    chains: Dict[ast.AST, Chain] = {}  # node -> the costliest chain that starts at it; dropped likewise
    worst = _NO_CHAIN
    for node, children in _children_first(tree):
        sizes[node] = isinstance(node, ast.expr) + sum(sizes.pop(child) for child in children)
        below = {child: chains.pop(child) for child in children if child in chains}
        fields = _CHAIN_FIELDS.get(type(node))
        if fields is None:
            continue
        continued = [below[value] for value in (getattr(node, name) for name in fields) if value in below]
        longest = max(continued, key=lambda chain: chain.cost, default=_NO_CHAIN)
        chains[node] = Chain(sizes[node] + longest.cost, longest.links + 1, node)
        if chains[node].cost > worst.cost:
            worst = chains[node]
    return worst


def _children_first(tree: ast.AST) -> Iterator[Tuple[ast.AST, List[ast.AST]]]:
    """Every node of `tree` with its children, each after its children; no recursion: chains run deep."""
    stack: List[Tuple[ast.AST, Optional[List[ast.AST]]]] = [(tree, None)]
    while stack:
        node, children = stack.pop()
        if children is None:
            children = [child for child in ast.iter_child_nodes(node) if not isinstance(child, _MARKERS)]
            stack.append((node, children))
            stack.extend((child, None) for child in children)
        else:
            yield node, children


def _location(source: str, node: ast.expr) -> Location:
    """Where `node` starts, with its column in characters (`ast` counts UTF-8 bytes)."""
    line = LINE_BREAK.split(source)[node.lineno - 1]
    prefix = line.encode("utf-8", "surrogatepass")[: node.col_offset]
    return Location(node.lineno, len(prefix.decode("utf-8", "ignore")) + 1)
