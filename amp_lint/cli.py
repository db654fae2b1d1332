"""The command line: options in, pipeline wired, report out. No analysis happens here.

`amp-lint [PATH]...` is `amp-lint check [PATH]...`; `rule`, `rules`, `verify` and `clean` are
subcommands. Exit codes: 0 clean, 1 findings (or a diff), 2 the tool could not do its job.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence

import click

from amp_lint import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
_SUBCOMMANDS = ("check", "rule", "rules", "verify", "clean", "server")


class _DefaultToCheck(click.Group):
    """A group whose default command is `check`, so `amp-lint src/` and `amp-lint --fix src/` work."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if not args or (args[0] not in _SUBCOMMANDS and args[0] not in ("--help", "-h", "--version")):
            args = ["check", *args]
        return super().parse_args(ctx, args)

    def get_command(self, ctx: click.Context, name: str):
        if name == "verify" and name not in self.commands:
            try:
                from amp_lint.verify.cli import verify
            except ImportError as error:  # pragma: no cover - packaging error
                raise click.ClickException(f"amp-lint verify is unavailable: {error}")
            self.add_command(verify)
        return super().get_command(ctx, name)

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(set(self.commands) | {"verify"})


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="amp-lint", message="%(prog)s %(version)s")
def main() -> None:
    """Find and fix PyTorch automatic mixed precision (AMP) mistakes.

    `amp-lint [PATH]...` checks Python files and notebooks (same as `amp-lint check`).
    """


def _codes(values: Sequence[str]) -> tuple:
    return tuple(code.strip() for value in values for code in value.split(",") if code.strip())


@main.command("check")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option("--fix/--no-fix", default=None, help="Apply safe fixes in place.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply unsafe fixes (they change numerics).")
@click.option("--diff", is_flag=True, help="Show the diff --fix would apply, write nothing (exit 1 if any).")
@click.option("--show-fixes", is_flag=True, help="List the fixes that were applied.")
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable (comma-separated; ALL).")
@click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
@click.option("--extend-select", multiple=True, help="Rule codes or prefixes to enable on top of the selection.")
@click.option("--exclude", multiple=True, help="Globs of files and folders to skip (replaces the defaults).")
@click.option("--extend-exclude", multiple=True, help="Globs to skip on top of the defaults.")
@click.option("--respect-gitignore/--no-respect-gitignore", default=None, help="Skip files that .gitignore lists.")
@click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too.")
@click.option(
    "--output-format",
    envvar="AMP_LINT_OUTPUT_FORMAT",
    default=None,
    help="full, concise, grouped, json, json-lines, github, sarif, junit, gitlab, pylint.",
)
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, writable=True), help="Write the report to a file.")
@click.option("--statistics", is_flag=True, help="Count findings per rule.")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when something was fixed (for pre-commit).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="Use this configuration file.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--show-settings", is_flag=True, help="Print the settings that apply, then exit.")
@click.option("--stdin-filename", help="The file name to report when checking standard input (`-`).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: all cores).")
@click.option("--no-cache", is_flag=True, help="Do not read or write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), envvar="AMP_LINT_CACHE_DIR", help="Where the cache lives.")
@click.option("--amp-dtype", type=click.Choice(["float16", "bfloat16"]), help="AMP100 conversion dtype.")
@click.option("--amp-device", help="AMP100 conversion device type (default: inferred, else cuda).")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to every line with a finding (migration aid).")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), help="Fail only on findings not in this baseline.")
@click.option("--write-baseline", "write_baseline_path", type=click.Path(dir_okay=False), help="Record the current findings as the baseline.")
@click.option("--prefilter-only", is_flag=True, hidden=True, help="Print the files that pass the prefilter (benchmarks).")
def check(paths, **options) -> None:
    """Check PATHS (default: the current folder) for AMP mistakes."""
    try:
        code = _run_check(list(paths), options)
    except KeyboardInterrupt:
        # Each file is written atomically: every file is either untouched or completely fixed.
        click.echo("amp-lint: interrupted; files already fixed are complete, the others untouched", err=True)
        code = 130
        from amp_lint.engine.runner import check_in_progress

        if check_in_progress():
            # The check thread is busy in native code: finalizing the interpreter around it would abort.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    sys.exit(code)


def _run_check(paths: List[str], options: dict) -> int:
    from amp_lint import rules as registry
    from amp_lint.files.config import ConfigError, SettingsResolver, describe
    from amp_lint.files.settings import RuleSelection, UnknownRuleError

    overrides = {
        key: value
        for key, value in {
            "select": _codes(options["select"]) or None,
            "ignore": _codes(options["ignore"]) or None,
            "extend_select": _codes(options["extend_select"]) or None,
            "exclude": tuple(options["exclude"]) or None,
            "extend_exclude": tuple(options["extend_exclude"]) or None,
            "respect_gitignore": options["respect_gitignore"],
            "fix": options["fix"],
            "unsafe_fixes": options["unsafe_fixes"],
            "output_format": options["output_format"],
            "amp_dtype": options["amp_dtype"],
            "amp_device": options["amp_device"],
        }.items()
        if value is not None
    }
    try:
        resolver = SettingsResolver(
            overrides,
            config_path=Path(options["config_path"]) if options["config_path"] else None,
            isolated=options["isolated"],
            all_codes=registry.all_codes(),
        )
        root = resolver.root_settings(Path.cwd())
        if options["show_settings"]:
            click.echo(describe(root), nl=False)
            return EXIT_CLEAN
        from amp_lint.reports import FORMATS

        if root.output_format not in FORMATS:
            raise click.UsageError(f"unknown output format {root.output_format!r} (choose from {', '.join(FORMATS)})")
        selection = RuleSelection.from_settings(root, registry.all_codes(), registry.default_codes())
    except (ConfigError, UnknownRuleError) as error:
        _fail(str(error))
    fix = bool(root.fix or options["diff"])
    run = _RunSpec(resolver, registry, options, fix, write=fix and not options["diff"])
    if paths == ["-"] or (not paths and options["stdin_filename"]):
        if options["add_noqa"] or options["write_baseline_path"]:
            _fail("--add-noqa and --write-baseline edit files; they do not work on standard input")
        return _check_stdin(run, root, options)
    if "-" in paths:
        _fail("`-` (standard input) cannot be mixed with paths")
    return _check_paths(run, root, selection, paths or ["."], options)


class _RunSpec:
    """The parts of a run shared by every file: how to turn a file's settings into a check config."""

    def __init__(self, resolver, registry, options, fix: bool, write: bool) -> None:
        self.resolver = resolver
        self.registry = registry
        self.options = options
        self.fix = fix
        self.write = write
        self._configs = {}

    def config_for(self, settings, path: str):
        from amp_lint.engine.runner import CheckConfig
        from amp_lint.files.settings import RuleSelection

        key = (id(settings), path if settings.per_file_ignores else None)
        config = self._configs.get(key)
        if config is None:
            all_codes = self.registry.all_codes()
            selection = RuleSelection.from_settings(settings, all_codes, self.registry.default_codes())
            enabled = selection.for_path(path, settings, all_codes)
            output_format = self.resolver.root_settings(Path.cwd()).output_format
            config = CheckConfig(
                enabled=enabled,
                fix=self.fix,
                unsafe_fixes=bool(settings.unsafe_fixes),
                with_edits=output_format in ("json", "json-lines", "sarif"),
                write=self.write,
                rule_options=(("amp_dtype", settings.amp_dtype), ("amp_device", settings.amp_device)),
            )
            self._configs[key] = config
        return config


def _check_paths(run: _RunSpec, root, selection, paths: List[str], options: dict) -> int:
    from amp_lint.files.config import ConfigError
    from amp_lint.files.sources import discover
    from amp_lint.engine.runner import RunPlan, execute
    from amp_lint.files.settings import UnknownRuleError

    try:
        files, errors = discover(paths, lambda p: run.resolver.for_path(p), force_exclude=options["force_exclude"])
        settings_by_folder: dict = {}  # a file's settings are its folder's: asked once per folder

        def settings_of(path: Path):
            folder = os.path.dirname(os.path.abspath(path))
            if folder not in settings_by_folder:
                settings_by_folder[folder] = run.resolver.for_path(path)
            return settings_by_folder[folder]

        planned = [(str(path), run.config_for(settings_of(path), str(path))) for path in files]
    except (ConfigError, UnknownRuleError) as error:
        _fail(str(error))
    if options["prefilter_only"]:
        from amp_lint.engine.runner import may_match

        for path, config in planned:
            try:
                text = Path(path).read_bytes().decode("utf-8", errors="replace")
            except OSError:
                continue
            if may_match(text, config):
                click.echo(path)
        return EXIT_CLEAN
    cache = None if options["no_cache"] or run.fix else _open_cache(options, root)
    report, diffs = execute(RunPlan(planned, errors), jobs=options["jobs"], cache=cache)
    if options["add_noqa"]:
        return _add_noqa(report)
    if options["write_baseline_path"]:
        from amp_lint.files.baseline import BaselineError, write_baseline

        try:
            write_baseline(Path(options["write_baseline_path"]), report)
        except BaselineError as error:
            _fail(str(error))
        click.echo(f"Wrote {len(report.diagnostics)} findings to {options['write_baseline_path']}", err=True)
        return EXIT_ERROR if report.errors else EXIT_CLEAN
    if options["baseline_path"]:
        from amp_lint.files.baseline import BaselineError, load_baseline

        try:
            report = load_baseline(Path(options["baseline_path"])).filter(report)
        except BaselineError as error:
            _fail(str(error))
    if options["diff"]:
        for diff in diffs:
            click.echo(diff, nl=False)
        for line in _error_lines(report):
            click.echo(line, err=True)
        if report.errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if diffs else EXIT_CLEAN
    _emit(report, root, options, fix_mode=run.fix)
    return _exit_code(report, options)


def _add_noqa(report) -> int:
    from amp_lint.fixes.noqa import add_noqa

    added, errors = add_noqa(report)
    for error in errors:
        click.echo(f"{error.filename}: error: {error.message}", err=True)
    total = sum(added.values())
    click.echo(f"Added {total} noqa directive{'s' if total != 1 else ''}.")
    return EXIT_ERROR if errors or report.errors else EXIT_CLEAN


def _check_stdin(run: _RunSpec, root, options: dict) -> int:
    from amp_lint.diagnostics import Report
    from amp_lint.files.sources import SourceError, decode_source
    from amp_lint.engine.runner import check_text

    name = options["stdin_filename"] or "-"
    try:
        source = decode_source(sys.stdin.buffer.read())
    except SourceError as error:
        _fail(f"{name}: {error.message}")
    config = run.config_for(run.resolver.for_path(Path(name).resolve() if name != "-" else Path.cwd()), name)
    outcome = check_text(source.text, name, config)
    report = Report(diagnostics=outcome.diagnostics, errors=outcome.errors, files_checked=1)
    if outcome.fixed:
        report.fixed[name] = outcome.fixed
    report.unsafe_fixable = outcome.unsafe_fixable
    report.sort()
    if options["baseline_path"]:
        from amp_lint.files.baseline import BaselineError, load_baseline

        try:
            report = load_baseline(Path(options["baseline_path"])).filter(report)
        except BaselineError as error:
            _fail(str(error))
    if run.fix:
        # Like Ruff: with --fix on standard input, the (fixed) code goes to standard output.
        fixed = outcome.fixed_text if outcome.fixed_text is not None else source.text
        if options["diff"]:
            import difflib

            diff = "".join(difflib.unified_diff(source.text.splitlines(True), fixed.splitlines(True), f"a/{name}", f"b/{name}"))
            click.echo(diff, nl=False)
            return EXIT_ERROR if report.errors else (EXIT_FINDINGS if diff else EXIT_CLEAN)
        sys.stdout.write(fixed)
        for line in _error_lines(report):
            click.echo(line, err=True)
        return _exit_code(report, options)
    _emit(report, root, options, fix_mode=False)
    return _exit_code(report, options)


def _open_cache(options: dict, root):
    from amp_lint.files.cache import ResultCache

    directory = options["cache_dir"] or os.path.join(root.root or os.getcwd(), ".amp_lint_cache")
    return ResultCache(Path(directory), root.cache_key(), f"{__version__}-{_code_fingerprint()}")


def _code_fingerprint() -> str:
    """Changes whenever amp-lint's own code does (an editable install keeps its version number)."""
    import zlib

    package = Path(__file__).parent
    stamp = []
    for path in sorted(package.rglob("*.py")):
        info = path.stat()
        stamp.append(f"{path.relative_to(package)}:{info.st_size}:{info.st_mtime_ns}")
    return format(zlib.crc32("\n".join(stamp).encode()), "08x")


def _emit(report, root, options: dict, *, fix_mode: bool) -> None:
    from amp_lint.reports import TEXT_FORMATS, RenderOptions, render

    output_format = root.output_format
    to_file = options["output_file"]
    color = _use_color(options["color"]) and not to_file
    render_options = RenderOptions(
        color=color,
        show_fixes=options["show_fixes"],
        statistics=options["statistics"],
        unsafe_fixes=bool(root.unsafe_fixes),
        fix_mode=fix_mode,
        quiet=options["quiet"],
    )
    try:
        text = render(report, output_format, render_options)
    except ValueError as error:
        _fail(str(error))
    if to_file:
        try:
            Path(to_file).write_text(text, encoding="utf-8")
        except OSError as error:
            _fail(f"cannot write {to_file}: {error.strerror or error}")
    else:
        click.echo(text, nl=False, color=color)
    if output_format not in TEXT_FORMATS or to_file:
        for line in _error_lines(report):
            click.echo(line, err=True)


def _error_lines(report) -> List[str]:
    from amp_lint.reports import error_lines

    return error_lines(report)


def _exit_code(report, options: dict) -> int:
    if report.errors:
        return EXIT_ERROR
    if options["exit_non_zero_on_fix"] and report.fixed:
        return EXIT_FINDINGS
    if report.diagnostics and not options["exit_zero"]:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _use_color(choice: str) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def _fail(message: str) -> None:
    click.echo(f"amp-lint: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


# --- rules ---------------------------------------------------------------------------------------


@main.command("rule")
@click.argument("code")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text")
def rule_command(code: str, output_format: str) -> None:
    """Explain one rule: what it finds, why it is wrong, what to write instead."""
    from amp_lint import rules as registry

    try:
        rule = registry.rule_by_code(code)
    except KeyError:
        _fail(f"unknown rule code {code!r}; `amp-lint rules` lists them")
    if output_format == "json":
        import json

        click.echo(json.dumps(_rule_record(rule), indent=2))
        return
    click.echo(f"# {rule.name} ({rule.code})\n")
    click.echo(f"{rule.summary}.\n")
    click.echo(f"Severity: {rule.severity.value}")
    click.echo(f"On by default: {'yes' if rule.default_enabled else 'no (select it with --select ' + rule.code + ')'}")
    click.echo(f"Fix: {_fix_words(rule)}\n")
    click.echo(rule.explanation())


def _fix_words(rule) -> str:
    if rule.fix_applicability is None:
        return "none"
    if rule.fix_applicability.value == "safe":
        return "safe (applied by --fix)"
    return "unsafe (applied by --fix --unsafe-fixes)"


def _rule_record(rule) -> dict:
    return {
        "code": rule.code,
        "name": rule.name,
        "summary": rule.summary,
        "severity": rule.severity.value,
        "default_enabled": rule.default_enabled,
        "fix": rule.fix_label(),
        "explanation": rule.explanation(),
    }


@main.command("rules")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text")
def rules_command(output_format: str) -> None:
    """List every rule: code, name, on by default, fix safety, summary."""
    from amp_lint import rules as registry

    if output_format == "json":
        import json

        click.echo(json.dumps([_rule_record(rule) for rule in registry.ALL_RULES], indent=2))
        return
    rows = [("code", "name", "default", "fix", "severity", "summary")]
    for rule in registry.ALL_RULES:
        rows.append(
            (rule.code, rule.name, "on" if rule.default_enabled else "off", rule.fix_label(), rule.severity.value, rule.summary)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row[:5], widths)) + "  " + row[5])


@main.command("server")
def server_command() -> None:
    """Run the language server for editors (LSP over stdio; needs `pip install 'amp-lint[lsp]'`)."""
    from amp_lint.server import serve

    sys.exit(serve())


@main.command("clean")
@click.option("--cache-dir", type=click.Path(file_okay=False), envvar="AMP_LINT_CACHE_DIR")
def clean_command(cache_dir: Optional[str]) -> None:
    """Remove the result cache."""
    from amp_lint.files.cache import ResultCache

    directory = Path(cache_dir or ".amp_lint_cache")
    removed = ResultCache.clean(directory)
    click.echo(f"Removed {directory}" if removed else f"No cache at {directory}")
