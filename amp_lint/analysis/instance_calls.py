"""`Callback(args).on_backward(self, batch)`: a method called on an instance that the call itself builds
(issue 26, principle 3: resolve the calls that can be resolved). The class resolves through the file's
imports to a project class of another module; its method is summarised like any other, with the method's
`self` standing for the new instance (`Callback().x`), never for the caller's `self`, and its other
parameters for the call's arguments (`trainer._scaler` inside is the caller's `self._scaler` when the caller
passes `self`). The call event's target is written `Callback().on_backward` (`calls.py`)."""

from __future__ import annotations

from typing import Optional, Tuple

from amp_lint.analysis.project import ModuleInfo
from amp_lint.analysis.project import qualified_in as _qualified

INSTANCE = "()."  # in a call target: `Class().method`


def split_instance_target(target: str) -> Optional[Tuple[str, str]]:
    """`Class().method` -> ("Class", "method"); None for any other target."""
    ctor, found, method = target.partition(INSTANCE)
    if not found or not ctor or not method or "." in method or "(" in ctor:
        return None
    return ctor, method


class InstanceCalls:
    """Mixed into `summaries.ProjectSummaries` (uses its `_method_of_class`)."""

    def instance_method(self, info: ModuleInfo, target: str):
        """(foreign module, class name, method) for `Class().method` with `Class` imported from a project
        module (not this file's own class: the file follows those itself), else None."""
        split = split_instance_target(target)
        if split is None:
            return None
        ctor, method = split
        qualified = _qualified(info, ctor)
        if qualified is None:
            return None
        return self._method_of_class(qualified, method, 0)

    @staticmethod
    def instance_holder(target: str) -> Optional[str]:
        """What the method's `self` stands for at the call: the new instance, `Class()`."""
        split = split_instance_target(target)
        return f"{split[0]}()" if split is not None else None


def held_by(event, holder: str):
    """An event of a method of the object held in `holder` (`self.clipper`), seen from the holder's class."""
    import dataclasses

    def moved(key):
        if key is None:
            return None
        if key == "self":
            return holder
        return holder + key[len("self") :] if key.startswith("self.") else key

    return dataclasses.replace(event, receiver=moved(event.receiver), target=moved(event.target), scaled_by=moved(event.scaled_by))
