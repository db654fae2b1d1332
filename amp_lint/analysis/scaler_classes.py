"""Project classes that a scaler name may hold, asked while a file is checked (issue 26, principle 4).

`self.grad_scaler` built from `DummyGradScaler()` in a base class of another module (torch's benchmark
runner) is that class's object, not a GradScaler (`built_in_a_base`, then `derives_from_torch_scaler`); a
parameter declared a class of the project that overrides a protocol method (hivemind's `GradScaler`) keeps
that class's meaning (`project_class_binds`). Each question is asked of the run's provider
(`summaries.ProjectSummaries`, which the file model reaches through `project_hooks.project()`); an unreadable
corner of the project answers as if nothing were known.
"""

from __future__ import annotations

from typing import Optional, Sequence

from amp_lint.analysis.project import qualified_in
from amp_lint.analysis.project_factories import is_scaler_class


def _class_and_bases(provider, qualified: Sequence[str]):
    """(qualified name, (module, class) or None when it is no class of the project) for the classes
    `qualified` and, breadth first, their bases as their modules import them (at most 16)."""
    pending, seen = list(qualified), set()
    while pending and len(seen) < 16:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.add(current)
        resolved = provider.index.resolve(current)
        if resolved is None or resolved[1] not in resolved[0].classes:
            yield current, None
            continue
        info, name = resolved
        provider.index.note_read(info.path)
        yield current, resolved
        pending.extend(qualified_in(info, base) or f"{info.name}.{base}" for base in info.classes[name] if base != "object")


def _asking(provider, question, default):
    """Run a question about the project's classes; an unreadable corner never costs the file its findings."""
    try:
        return question(provider)
    except (RecursionError, MemoryError):
        raise
    except Exception:
        return default


def project_class_binds(provider, model, qualified: str, names: frozenset) -> bool:
    """For a rule: does `qualified` (a class name as the module of `model` imports it) resolve to a class of the
    project that binds one of `names` itself or through a base of the project (not torch's)? False without a
    project, for a name outside it, or when the module cannot be read."""
    return _asking(
        provider,
        lambda provider: any(
            found is not None and not names.isdisjoint(found[0].members.get(found[1], {}))
            for _, found in _class_and_bases(provider, [qualified])
        ),
        False,
    )


def built_in_a_base(provider, model, scope, attribute: str) -> Optional[str]:
    """For `self.<attribute>` in a method of a class of the checked file: the project class that a base class in
    another module builds it from (`self.grad_scaler = DummyGradScaler()` in torch's benchmark runner, the
    only assignment there), the nearest base first; None otherwise."""
    cls = model.classes.get(scope.class_name or "")
    if cls is None:
        return None
    bases = [q for q in (scope.names.qualify(base.value) for base in cls.bases) if q and not q.startswith("torch.")]

    def question(provider):
        for _, found in _class_and_bases(provider, bases):
            built = provider.attribute_classes_of(found[0], found[0].path).get(found[1], {}).get(attribute) if found else None
            if built is not None:
                return built
        return None

    return _asking(provider, question, None)


def derives_from_torch_scaler(provider, qualified: str) -> bool:
    """Does the project class `qualified` derive (through project classes) from a torch GradScaler? True when
    a base cannot be read (it may be one)."""
    return _asking(
        provider,
        lambda provider: any(
            is_scaler_class(provider.index, current) or (found is None and not current.startswith("builtins."))
            for current, found in _class_and_bases(provider, [qualified])
        ),
        True,
    )
