"""The guard as a pytest option: ``pytest --amp-guard=warn|raise|record [--amp-guard-report guard.json]``.

Registered through the ``pytest11`` entry point, so it loads in every pytest session of an environment where
amp-lint is installed: it only adds the options, and imports torch (through :func:`amp_lint.guard.install`) only
when ``--amp-guard`` is given. With ``raise`` a breach fails the test that made it; ``warn`` turns each breach into
a warning (pytest lists them); every mode writes the report to ``--amp-guard-report`` at the end of the session and
prints a summary line per breach.
"""

from __future__ import annotations

from typing import Any

from amp_lint.guard.report import MODES


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("amp-guard", "amp-lint's runtime guard of the GradScaler / autocast protocol")
    group.addoption(
        "--amp-guard",
        choices=MODES,
        default=None,
        help="check every GradScaler against the AMP protocol while the tests run: warn, raise (fail the test) or "
        "record (the report only)",
    )
    group.addoption("--amp-guard-report", default=None, metavar="PATH", help="write the guard's breaches to PATH (JSON)")
    group.addoption(
        "--amp-guard-grad-reads", action="store_true", help="also check .grad reads of the tested code (slower)"
    )


def pytest_configure(config: Any) -> None:
    mode = config.getoption("--amp-guard")
    if mode is None:
        return
    from amp_lint.guard import install

    config._amp_guard_report = install(mode, grad_reads=config.getoption("--amp-guard-grad-reads"))


def pytest_unconfigure(config: Any) -> None:
    report = getattr(config, "_amp_guard_report", None)
    if report is None:
        return
    from amp_lint.guard import uninstall

    uninstall()
    path = config.getoption("--amp-guard-report")
    if path:
        report.write(path)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    report = getattr(config, "_amp_guard_report", None)
    if report is not None:
        terminalreporter.write_line(report.summary())
