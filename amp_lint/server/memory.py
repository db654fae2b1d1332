"""The server's memory: a warm-up that makes the analysis's caches before the first document's check, and the
memory a check freed handed back to the system between checks (a long-lived process, unlike a CLI run).
Nothing here imports pygls."""

from __future__ import annotations

import logging

from amp_lint.engine.warm_up import WARM_UP  # noqa: F401  (the program the server checks first)


def warm_up() -> None:
    """Import the engine, the rules and LibCST, and check a small training program once (`engine.warm_up`)."""
    try:
        from amp_lint.engine.warm_up import check_warm_up

        check_warm_up()
        import linecache

        import amp_lint.fixes.text_edits  # noqa: F401  (code actions)

        # What the first checks cached for good (the fields of each LibCST node type, read from LibCST's
        # source) is in place; the source lines they were read from are not needed again. Caches made
        # now, not in the middle of a big file's check, do not pin the memory its tree leaves behind.
        linecache.clearcache()
        release_memory()
        # What is loaded now (modules, rules, LibCST's tables) lives as long as the server: out of the
        # collector's sight, a full collection while a document is checked does not walk it again.
        import gc

        gc.collect()
        gc.freeze()
    except Exception as error:  # the first real check will say what is wrong
        logging.getLogger("amp_lint.server").warning("warm-up failed: %s: %s", type(error).__name__, error)


def settle_step(checker, key: str) -> bool:
    """One step of `UnitChecker.settle`; the memory its checks freed handed back once it is done."""
    more = checker.settle(key)
    if not more:  # idle time: the verification's trees, cycles included, collected before the memory goes back
        import gc

        gc.collect()
        release_memory()
    return more


def release_memory() -> None:
    """Give the memory a check freed back to the system (glibc keeps it otherwise: a 3,000-line file's
    tree left the server at 140 MB instead of 75), and the `ast` tree the prefilter keeps for the next
    reader of the same text (7 MB for a 3,000-line file; a server's next check is of another text)."""
    from amp_lint.parse import python_ast

    python_ast.forget()
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            import ctypes

            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None
