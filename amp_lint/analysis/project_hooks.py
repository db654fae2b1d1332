"""What the file model may ask of the rest of the project, without importing the layer that knows it.

The file model reads one file. What other modules of the project define (a function that returns a
GradScaler or an autocast, a base class that builds `self.scaler`, the summary of a function another module
defines) is the project layer's business (`summaries.ProjectSummaries`), which sits above the model and
builds models of other modules itself. So the answers travel down through this module: while a file is
checked, the project layer puts its provider here (`ACTIVE`, `SUMMARIES`, `FOLLOWED_CALLS`), and the model
asks `project()`, which is that provider or `NO_PROJECT` (stdin, the API without an index: nothing is known
about other modules, and every answer says so).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from amp_lint.analysis.events import Event
from amp_lint.analysis.function_summary import Summary


class ProjectAnswers:
    """The questions the file model asks about other modules of the project, answered as without a project.
    The project layer's provider (`summaries.ProjectSummaries`) answers them from the project's modules."""

    def scaler_factory(self, name: str) -> Optional[str]:
        """The imported name `name` is a project function that returns a GradScaler on every path that returns:
        the qualified scaler class, else None."""
        return None

    def autocast_factory(self, name: str) -> Optional[Tuple[str, Optional[str], Optional[bool]]]:
        """The imported name `name` is a project function that returns an autocast on every path: (qualified
        name, device, enabled), else None."""
        return None

    def built_in_a_base(self, model, scope, attribute: str) -> Optional[str]:
        """The project class that a base class in another module builds `self.<attribute>` from, else None."""
        return None

    def derives_from_torch_scaler(self, qualified: str) -> bool:
        """Does the project class `qualified` derive from a torch GradScaler? (Unknown counts as yes.)"""
        return True

    def project_class_binds(self, model, qualified: str, names: frozenset) -> bool:
        """Does the project class `qualified` bind one of `names` itself or through a base of the project?"""
        return False


NO_PROJECT = ProjectAnswers()

# The providers of the files being checked, innermost last (`summaries.ProjectSummaries.checking` and
# `following` put theirs here while a file's analysis runs).
ACTIVE: List[ProjectAnswers] = []
# Summaries of callees this file does not define: each is called with (model, call event) and returns a
# `Summary` or None (`steps.with_helpers_inlined` asks them where a call leaves the file).
SUMMARIES: List[Callable[[object, Event], Optional[Summary]]] = []
# Dotted callees (`helpers.clip`, `self.callback.on_after_backward`) that such a provider can follow: the
# model records a call event for those only (by default it records plain names and `self.method` calls).
FOLLOWED_CALLS: List[Callable[[str], bool]] = []


def project() -> ProjectAnswers:
    """The provider of the file being built or checked, or `NO_PROJECT`."""
    return ACTIVE[-1] if ACTIVE else NO_PROJECT
