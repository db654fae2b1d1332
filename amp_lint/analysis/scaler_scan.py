"""Does a function drive a GradScaler? Asked once per dotted call of a scope, answered in linear time.

A scope's events are only ever added or reordered while its file is built, so the answer is kept per scope
with how many events it has read, and only the events added since are read again (issue 45, item 7).
"""

from __future__ import annotations

import weakref

from amp_lint.analysis.events import SCALER_KINDS


def drives_a_scaler(scope) -> bool:
    """Does the function touch a GradScaler (scale, a scaled backward, step, update, unscale_)?

    Asked once per dotted call of the scope (`resolve_followed_calls`, `summaries`): the answer is kept
    per scope with how many of its events it has read, and only events added since are read again (a
    scope's events are only ever added or reordered), so a scope of n calls costs n, not n**2 (issue 45:
    16,000 autocast blocks in one function took minutes)."""
    events = scope.events
    seen, found = _SCALER_SCAN.get(scope, (0, False))
    if found and seen <= len(events):
        return True
    if seen > len(events):  # events were dropped: read them all again
        seen = 0
    found = any(e.kind in SCALER_KINDS or e.scaled_by is not None for e in events[seen:])
    _SCALER_SCAN[scope] = (len(events), found)
    return found


# Scope -> (events read, whether one of them drives a scaler); forgotten with the scope.
_SCALER_SCAN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
