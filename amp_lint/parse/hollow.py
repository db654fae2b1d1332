"""Hollowing: lines that a parser need not read become one string statement, so that it reads one token
where it read a whole function, and every row and column of what is kept stays that of the whole text.

Two callers: the check's LibCST parse (`relevant`: the units no rule needs) and the project index's `ast`
parse of the modules a file imports (`outline`: every function's body).
"""

from __future__ import annotations

from typing import List, Sequence, Tuple


def hollow(lines: List[str], regions: Sequence[Tuple[int, int]]) -> None:
    """Empty the regions (first and last line, 1-based, sorted, not overlapping) of `lines` (each with its
    line break) in place: each becomes one string statement at the indentation of its first line, spanning
    all its lines. Regions with only blank lines between them become one."""
    for first, last in _joined(regions, lines):
        _hollow(lines, first, last)


def _joined(regions: Sequence[Tuple[int, int]], lines: List[str]) -> List[Tuple[int, int]]:
    joined: List[Tuple[int, int]] = []
    for first, last in regions:
        if joined and all(not lines[index].strip() for index in range(joined[-1][1], first - 1)):
            joined[-1] = (joined[-1][0], last)
        else:
            joined.append((first, last))
    return joined


def _hollow(lines: List[str], first: int, last: int) -> None:
    """A string statement that spans them all, at the indentation of the first: the rows and columns of
    everything after it stay those of the whole text, and a parser reads one string token where it read a
    node for each empty line (the blank lines of torch's `distributed_test.py` cost LibCST a three times
    longer parse than the code it keeps)."""
    def line_break(line: str) -> str:
        return line[len(line.rstrip("\r\n")) :]

    head = lines[first - 1]
    indent = head[: len(head) - len(head.lstrip(" \t"))]
    if first == last:
        lines[first - 1] = indent + '""' + line_break(head)
        return
    lines[first - 1] = indent + '"""' + line_break(head)
    for index in range(first, last - 1):
        lines[index] = line_break(lines[index])
    lines[last - 1] = '"""' + line_break(lines[last - 1])
