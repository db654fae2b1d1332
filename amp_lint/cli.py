"""The command line: options in, pipeline wired, report out. No analysis happens here.

`amp-lint [PATH]...` is `amp-lint check [PATH]...`; `rule`, `rules`, `verify` and `clean` are
subcommands. Exit codes: 0 clean, 1 findings (or a diff), 2 the tool could not do its job.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import click
from click.shell_completion import add_completion_class

from amp_lint import __version__
from amp_lint.files.settings import OUTPUT_FORMATS
from amp_lint.reports import error_lines
from amp_lint.reports.printable import printable_path
from amp_lint.reports.shell_completion import PowerShellComplete

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
_SUBCOMMANDS = ("check", "rule", "rules", "verify", "clean", "server", "generate-shell-completion")


class _DefaultToCheck(click.Group):
    """A group whose default command is `check`, so `amp-lint src/` and `amp-lint --fix src/` work."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if ctx.resilient_parsing and not args:
            return super().parse_args(ctx, args)  # shell completion of the first word: see shell_complete
        if args and args[0] not in _SUBCOMMANDS:
            _refuse_mistyped_subcommand(args[0])
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

    def shell_complete(self, ctx: click.Context, incomplete: str):
        """The first word completes to a subcommand, or to what `check` takes (its options, a path)."""
        items = super().shell_complete(ctx, incomplete)
        check = self.get_command(ctx, "check")
        with check.make_context("check", [], parent=ctx, resilient_parsing=True) as check_ctx:
            items += check.shell_complete(check_ctx, incomplete)
        if not incomplete.startswith("-"):
            from click.shell_completion import CompletionItem

            items.append(CompletionItem(incomplete, type="file"))
        return items

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(set(self.commands) | {"verify"})


def _refuse_mistyped_subcommand(word: str) -> None:
    """`amp-lint chek src/`, `amp-lint format x.py`: a first word that names no file or folder and reads as a
    subcommand (letters, digits, `-`, `_`: no dot, no slash) is an unrecognized subcommand, as Ruff says, and
    nothing is checked. A file or folder of that name is a path like any other (`amp-lint src`)."""
    import re

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", word) or os.path.lexists(word):
        return
    import difflib

    close = difflib.get_close_matches(word, _SUBCOMMANDS, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"the subcommands are {', '.join(_SUBCOMMANDS)}"
    click.echo(f"amp-lint: error: unrecognized subcommand {word!r} (nor a file or folder); {hint}", err=True)
    sys.exit(EXIT_ERROR)


class _CheckCommand(click.Command):
    """`check`, whose typo hints for options name only options `--help` shows (never the hidden ones)."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as error:
            import difflib

            visible = [
                name
                for param in self.get_params(ctx)
                if isinstance(param, click.Option) and not param.hidden
                for name in (*param.opts, *param.secondary_opts)
            ]
            error.possibilities = difflib.get_close_matches(error.option_name, visible, n=1)
            raise


def _completions(values, incomplete: str, helps=None) -> list:
    from click.shell_completion import CompletionItem

    return [CompletionItem(v, help=(helps or {}).get(v)) for v in values if v.startswith(incomplete)]


def _complete_codes(ctx, param, incomplete: str) -> list:
    """`--select AMP0<TAB>`: rule codes (with their summaries) and ALL; after a comma, the next one."""
    from amp_lint import rules as registry

    done, comma, last = incomplete.rpartition(",")
    summaries = {rule.code: rule.summary for rule in registry.ALL_RULES}
    items = _completions(["ALL", *sorted(summaries)], last.upper(), summaries)
    for item in items:
        item.value = done + comma + item.value
    return items


add_completion_class(PowerShellComplete)


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="amp-lint", message="%(prog)s %(version)s")
def main() -> None:
    """Find and fix PyTorch automatic mixed precision (AMP) mistakes.

    `amp-lint [PATH]...` checks Python files and notebooks (same as `amp-lint check`).
    """
    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show `λ` gets `?`, not a traceback
        if hasattr(stream, "reconfigure") and stream.errors == "strict":
            stream.reconfigure(errors="replace")


@main.command("check", cls=_CheckCommand)
# readable=False: a file that cannot be read is reported as an error line and the others still checked.
@click.argument("paths", nargs=-1, type=click.Path(path_type=str, readable=False))
@click.option("--fix/--no-fix", default=None, help="Apply safe fixes in place.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply unsafe fixes (they change numerics).")
@click.option(
    "--show-assumed/--no-show-assumed",
    default=None,
    help="Also report findings that rest on an assumption (an unknown condition, callee or receiver).",
)
@click.option(
    "--preview/--no-preview",
    default=None,
    help="Enable preview mode: rules and fixes marked preview (new, not yet proved on real code) run too.",
)
@click.option("--diff", is_flag=True, help="Show the diff --fix would apply, write nothing (exit 1 if any).")
@click.option("--show-fixes/--no-show-fixes", default=None, help="List the fixes that were applied.")
@click.option("--fix-only/--no-fix-only", default=None, help="Apply fixes; do not report what is left (implies --fix).")
@click.option("--fixable", multiple=True, shell_complete=_complete_codes, help="Rule codes or prefixes whose fixes may be applied (default: ALL).")
@click.option("--unfixable", multiple=True, shell_complete=_complete_codes, help="Rule codes or prefixes reported without a fix.")
@click.option("--extend-fixable", multiple=True, shell_complete=_complete_codes, help="Rule codes or prefixes whose fixes may be applied, on top of --fixable.")
@click.option("--select", multiple=True, shell_complete=_complete_codes, help="Rule codes or prefixes to enable (comma-separated; ALL).")
@click.option("--ignore", multiple=True, shell_complete=_complete_codes, help="Rule codes or prefixes to disable.")
@click.option("--extend-ignore", multiple=True, shell_complete=_complete_codes, help="Rule codes or prefixes to disable, on top of --ignore (Ruff's older name).")
@click.option("--extend-select", multiple=True, shell_complete=_complete_codes, help="Rule codes or prefixes to enable on top of the selection.")
@click.option("--exclude", multiple=True, help="Globs of files and folders to skip (replaces the defaults).")
@click.option("--extend-exclude", multiple=True, help="Globs to skip on top of the defaults.")
@click.option("--per-file-ignores", multiple=True, help="PATTERN:CODES pairs (comma-separated); replaces the configuration's.")
@click.option("--extend-per-file-ignores", multiple=True, help="PATTERN:CODES pairs on top of the configuration's.")
@click.option("--respect-gitignore/--no-respect-gitignore", default=None, help="Skip files that .gitignore lists.")
@click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too.")
@click.option(
    "--output-format",
    envvar="AMP_LINT_OUTPUT_FORMAT",
    shell_complete=lambda ctx, param, incomplete: _completions(OUTPUT_FORMATS, incomplete),
    default=None,
    help="full, concise, grouped, json, json-lines, github, sarif, junit, gitlab, pylint.",
)
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, writable=True), help="Write the report to a file.")
@click.option("--statistics", is_flag=True, help="Count findings per rule.")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
@click.option("-s", "--silent", is_flag=True, help="Print nothing; the exit code still says what was found.")
@click.option("--show-files", is_flag=True, help="Print the files that would be checked, then exit.")
@click.option("-w", "--watch", is_flag=True, help="Check again whenever a checked file changes (Ctrl-C stops).")
@click.option(
    "--fail-on",
    type=click.Choice(["info", "warning", "error"]),
    help="The lowest severity that fails the run (exit 1); default: info, every finding fails, as in Ruff.",
)
@click.option("-e", "--exit-zero", is_flag=True, help="Exit 0 even when findings remain.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when something was fixed (for pre-commit).")
@click.option(
    "--config",
    "config_options",
    multiple=True,
    help="A configuration file to use, or a TOML `KEY = VALUE` pair that overrides every configuration file.",
)
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--show-settings", is_flag=True, help="Print the settings that apply, then exit.")
@click.option("--stdin-filename", help="The file name to report when checking standard input (`-`).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: all cores).")
@click.option("-n", "--no-cache", is_flag=True, help="Do not read or write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), envvar="AMP_LINT_CACHE_DIR", help="Where the cache lives.")
@click.option("--amp-dtype", type=click.Choice(["float16", "bfloat16"]), help="AMP100 conversion dtype.")
@click.option(
    "--amp-device", callback=lambda ctx, param, value: _device_type(value), help="AMP100 conversion device type (default: inferred, else cuda)."
)
@click.option(
    "--target-torch",
    help="The oldest torch the code must support (e.g. 2.1): fixes suggest only APIs it has "
    "(default: the lower bound of the project's torch requirement).",
)
@click.option("--ignore-noqa", is_flag=True, help="Ignore every `# noqa` comment (report what they suppress).")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to every line with a finding (migration aid).")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), help="Fail only on findings not in this baseline.")
@click.option("--write-baseline", "write_baseline_path", type=click.Path(dir_okay=False), help="Record the current findings as the baseline.")
@click.option("--prefilter-only", is_flag=True, hidden=True, help="Print the files that pass the prefilter (benchmarks).")
def check(paths, **options) -> None:
    """Check PATHS (default: the current folder) for AMP mistakes."""
    from amp_lint.engine.runner import terminate_as_interrupt

    try:
        with terminate_as_interrupt():  # SIGTERM stops the run as Ctrl-C does, and exits 143
            code = _run_check(list(paths), options)
    except KeyboardInterrupt as interrupt:
        # Each file is written atomically: every file is either untouched or completely fixed.
        click.echo("amp-lint: interrupted; files already fixed are complete, the others untouched", err=True)
        code = getattr(interrupt, "exit_code", 130)  # SIGTERM: 143
        from amp_lint.engine.runner import check_in_progress

        if check_in_progress():
            # The check thread is busy in native code: finalizing the interpreter around it would abort.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    sys.exit(code)


def _device_type(value: Optional[str]) -> Optional[str]:
    """`--amp-device` goes into fixed code: only a device type (an identifier) is accepted."""
    from amp_lint.files.config import is_device_type

    if value is not None and not is_device_type(value):
        raise click.BadParameter(f"{value!r} is not a device type such as 'cuda' or 'cpu' (an identifier)")
    return value


def _run_check(paths: List[str], options: dict) -> int:
    from amp_lint import rules as registry
    from amp_lint.engine.session import RunSpec, preview_selection_warnings
    from amp_lint.files.config import ConfigError, SettingsResolver
    from amp_lint.files.overrides import config_options, settings_overrides
    from amp_lint.files.settings import RuleSelection, UnknownRuleError

    try:
        config_path, inline = config_options(options["config_options"], registry.all_codes())
        resolver = SettingsResolver(
            settings_overrides(options),
            config_path=config_path,
            isolated=options["isolated"],
            all_codes=registry.all_codes(),
            inline_overrides=inline,
        )
        root = resolver.root_settings(Path.cwd())
        if options["show_settings"]:  # as Ruff: for the first file the paths name (or the stdin name, or the cwd)
            from amp_lint.engine.session import describe_settings

            click.echo(describe_settings(resolver, registry, paths, options["stdin_filename"], options["force_exclude"]), nl=False)
            return EXIT_CLEAN
        from amp_lint.reports import FORMATS

        if root.output_format not in FORMATS:
            raise click.UsageError(f"unknown output format {root.output_format!r} (choose from {', '.join(FORMATS)})")
        RuleSelection.from_settings(root, registry.all_codes(), registry.default_codes())  # unknown codes fail here
        warnings = preview_selection_warnings(root, registry)
    except (ConfigError, UnknownRuleError) as error:
        _fail(str(error))
    for warning in warnings if not options["silent"] else ():
        click.echo(f"amp-lint: warning: {warning}", err=True)
    options["_fail_on"] = root.fail_on
    if options["fix_only"]:
        options["quiet"] = True  # the findings left are not reported
    fix = bool(root.fix or options["diff"] or options["fix_only"])
    run = RunSpec(resolver, registry, fix, write=fix and not options["diff"], ignore_noqa=options["ignore_noqa"])
    if paths == ["-"] or (not paths and options["stdin_filename"]):
        if options["add_noqa"] or options["write_baseline_path"]:
            _fail("--add-noqa and --write-baseline edit files; they do not work on standard input")
        return _check_stdin(run, root, options)
    if "-" in paths:
        _fail("`-` (standard input) cannot be mixed with paths")
    if options["watch"]:
        if run.fix:
            _fail("--watch only checks; it does not work with --fix or --diff")
        return _watch(run, root, paths or ["."], options)
    return _check_paths(run, root, paths or ["."], options)


def _watch(run, root, paths: List[str], options: dict) -> int:
    """`--watch`, as Ruff's: check, then again at each change of a Python or configuration file, until Ctrl-C."""
    from amp_lint.engine.session import watch

    try:
        watch(paths, lambda: _check_paths(run.fresh(), root, paths, options), lambda line: click.echo(line, err=True))
    except KeyboardInterrupt as interrupt:
        if hasattr(interrupt, "exit_code"):
            raise  # SIGTERM: 143, not a normal end
    return EXIT_CLEAN  # Ctrl-C is how a watch ends


def _check_paths(run, root, paths: List[str], options: dict) -> int:
    from amp_lint.engine.workers import Scheduler

    scheduler = Scheduler(options["jobs"])
    try:
        return _check_planned(run, root, paths, options, scheduler)
    finally:
        scheduler.close()


def _check_planned(run, root, paths: List[str], options: dict, scheduler) -> int:
    from amp_lint.diagnostics import Report
    from amp_lint.engine import session
    from amp_lint.engine.runner import RunPlan, execute
    from amp_lint.engine.workers import EARLY_START_BYTES
    from amp_lint.files import walk_index as walks
    from amp_lint.files.config import ConfigError
    from amp_lint.files.settings import UnknownRuleError

    checks = not (options["show_files"] or options["prefilter_only"])
    cache = None if options["no_cache"] or run.fix or not checks else session.open_cache(options["cache_dir"], root)
    # A cold walk that finds much source starts the workers while it goes on (they load LibCST meanwhile);
    # with stored results, most files will not need them.
    cold = cache is None or not cache.has_entries
    early = (EARLY_START_BYTES, scheduler.start_early) if checks and cold else None
    walk, stats = walks.load(cache), {}  # the walk index (None without a cache): unchanged folders are not listed
    try:
        planned, errors = run.plan(paths, force_exclude=options["force_exclude"], on_many_bytes=early, walk_index=walk, stats=stats)
    except (ConfigError, UnknownRuleError) as error:
        _fail(str(error))
    if not planned and not errors and not options["silent"]:
        # As Ruff (0.17: on standard error, also with -q, exit 0): a typo in a path should not pass silently.
        click.echo("amp-lint: warning: No Python files found under the given path(s)", err=True)
    if options["show_files"]:
        # As Ruff: the files a check would read, absolute, sorted; nothing is checked.
        for path in sorted(os.path.abspath(p) for p, _ in planned):
            click.echo(printable_path(path))  # a name's control characters escaped: no escape sequence runs
        for line in error_lines(Report(errors=errors)):
            click.echo(line, err=True)
        return EXIT_ERROR if errors else EXIT_CLEAN
    if options["prefilter_only"]:
        click.echo("".join(path + "\n" for path in session.prefiltered(planned)), nl=False)
        return EXIT_CLEAN
    if cache is not None:
        walks.store(cache, walk)  # keyed as it was read: before the per-file keys below
        session.key_cache_by_files(cache, planned)
    report, diffs = execute(RunPlan(planned, errors, stats), jobs=options["jobs"], cache=cache, scheduler=scheduler)
    if options["add_noqa"]:
        return _add_noqa(report)
    if options["write_baseline_path"]:
        from amp_lint.files.baseline import BaselineError, write_baseline

        try:
            write_baseline(Path(options["write_baseline_path"]), report)
        except BaselineError as error:
            _fail(str(error))
        click.echo(f"Wrote {len(report.diagnostics)} findings to {printable_path(options['write_baseline_path'])}", err=True)
        return EXIT_ERROR if report.failures else EXIT_CLEAN
    report = _apply_baseline(report, options)
    if options["diff"]:
        if not options["silent"]:
            for diff in diffs:
                click.echo(diff, nl=False)
            _diff_summary(report, options, bool(diffs))
            for line in error_lines(report):
                click.echo(line, err=True)
        if report.failures:  # a refused fix is no failure: its finding is reported without a fix
            return EXIT_ERROR
        return EXIT_FINDINGS if diffs else EXIT_CLEAN
    if options["fix_only"]:
        return _fix_only_result(report, options)
    _emit(report, root, options, fix_mode=run.fix)
    return _exit_code(report, options)


def _apply_baseline(report, options: dict):
    if not options["baseline_path"]:
        return report
    from amp_lint.files.baseline import BaselineError, load_baseline

    try:
        return load_baseline(Path(options["baseline_path"])).filter(report)
    except BaselineError as error:
        _fail(str(error))


def _fix_only_result(report, options: dict, err: bool = False) -> int:
    """`--fix-only`, as Ruff: say what was fixed (on stderr when stdout carries the code), never what is left."""
    from amp_lint.engine.session import fix_only_exit_code
    from amp_lint.reports.text import plural

    if not options["silent"]:
        if report.fixed_count:
            click.echo(f"Fixed {plural(report.fixed_count, 'error')}.", err=err)
        for line in error_lines(report):
            click.echo(line, err=True)
    return fix_only_exit_code(report, exit_non_zero_on_fix=options["exit_non_zero_on_fix"])


def _diff_summary(report, options: dict, any_diff: bool) -> None:
    """After the diffs, as Ruff: `Would fix 2 errors.` (nothing when there is nothing to fix)."""
    from amp_lint.reports.text import would_fix_line

    if not (options["quiet"] or options.get("silent") or not any_diff):
        click.echo("\n" + would_fix_line(report))


def _add_noqa(report) -> int:
    from amp_lint.fixes.noqa import add_noqa
    from amp_lint.reports.text import plural

    added, errors = add_noqa(report)
    for error in errors:
        click.echo(f"{printable_path(error.filename)}: error: {error.message}", err=True)
    click.echo(f"Added {plural(sum(added.values()), 'noqa directive')}.")
    return EXIT_ERROR if errors or report.failures else EXIT_CLEAN


def _check_stdin(run, root, options: dict) -> int:
    from amp_lint.diagnostics import Report
    from amp_lint.engine.session import StdinError, check_stdin, unified_diff

    from amp_lint.files.sources import SourceError, read_stream

    name = options["stdin_filename"] or "-"
    try:
        raw = read_stream(sys.stdin.buffer, name)
    except SourceError as error:
        _fail(f"{name}: {error.message}")
    try:
        result = check_stdin(run, raw, name, force_exclude=options["force_exclude"])
    except StdinError as error:
        _fail(str(error))
    if result.excluded:
        # As Ruff: an excluded file is not checked; with --fix its text comes back unchanged.
        if run.fix and not options["diff"]:
            sys.stdout.buffer.write(raw)
        elif not run.fix:
            _emit(Report(), root, options, fix_mode=False)
        return EXIT_CLEAN
    report = _apply_baseline(result.report, options)
    if run.fix:
        # Like Ruff: with --fix on standard input, the (fixed) code goes to standard output.
        if options["diff"]:
            diff = unified_diff(result.text, result.fixed_text, name)
            click.echo(diff, nl=False)
            _diff_summary(report, options, bool(diff))
            return EXIT_ERROR if report.failures else (EXIT_FINDINGS if diff else EXIT_CLEAN)
        _write_code(result.fixed_bytes)  # the code itself, even with --silent: it is the output, not a message
        if options["fix_only"]:
            return _fix_only_result(report, options, err=True)
        # As Ruff: the findings left (and the summary) go to standard error, or to --output-file.
        _emit(report, root, options, fix_mode=True, err=True)
        return _exit_code(report, options)
    _emit(report, root, options, fix_mode=False)
    return _exit_code(report, options)


def _write_code(data: bytes) -> None:
    """Code to standard output as bytes (its own encoding), whatever the terminal's (not a message to decode)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _emit(report, root, options: dict, *, fix_mode: bool, err: bool = False) -> None:
    from amp_lint.reports import TEXT_FORMATS, RenderOptions, color_wanted, render

    if options["silent"] and not options["output_file"]:
        return  # -s: nothing at all; the exit code says it
    output_format = root.output_format
    to_file = options["output_file"]
    color = color_wanted(options["color"], os.environ, (sys.stderr if err else sys.stdout).isatty()) and not to_file
    render_options = RenderOptions(
        color=color,
        show_fixes=root.show_fixes,
        statistics=options["statistics"],
        unsafe_fixes=bool(root.unsafe_fixes),
        fix_mode=fix_mode,
        quiet=options["quiet"],
        fail_on=root.fail_on,
    )
    try:
        text = render(report, output_format, render_options)
    except ValueError as error:
        _fail(str(error))
    if to_file:
        try:
            Path(to_file).parent.mkdir(parents=True, exist_ok=True)  # as Ruff: `-o out/r.txt` makes out/
            Path(to_file).write_text(text, encoding="utf-8")
        except OSError as error:
            _fail(f"cannot write {to_file}: {error.strerror or error}")
    else:
        try:
            click.echo(text, nl=False, color=color, err=err)
        except OSError as error:  # `>/dev/full`: the report is lost, which is no clean run nor a finding
            _fail(f"cannot write the report to standard {'error' if err else 'output'}: {error.strerror or error}")
    if (output_format not in TEXT_FORMATS or to_file) and not options["silent"]:
        for line in error_lines(report):
            click.echo(line, err=True)


def _exit_code(report, options: dict) -> int:
    from amp_lint.engine.session import exit_code

    return exit_code(
        report,
        fail_on=options.get("_fail_on", "info"),
        exit_zero=options["exit_zero"],
        exit_non_zero_on_fix=options["exit_non_zero_on_fix"],
    )


def _fail(message: str) -> None:
    click.echo(f"amp-lint: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


# --- rules, server, cache, completion -------------------------------------------------------------


@main.command("rule")
@click.argument("code", shell_complete=_complete_codes)
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text")
def rule_command(code: str, output_format: str) -> None:
    """Explain one rule: what it finds, why it is wrong, what to write instead."""
    from amp_lint import rules as registry
    from amp_lint.reports.rule_docs import rule_json, rule_text

    try:
        rule = registry.rule_by_code(code)
    except KeyError:
        _fail(f"unknown rule code {code!r}; `amp-lint rules` lists them")
    click.echo(rule_json(rule) if output_format == "json" else rule_text(rule), nl=False)


@main.command("rules")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text")
def rules_command(output_format: str) -> None:
    """List every rule: code, name, on by default, fix safety, summary."""
    from amp_lint import rules as registry
    from amp_lint.reports.rule_docs import rules_json, rules_text

    click.echo((rules_json if output_format == "json" else rules_text)(registry.ALL_RULES), nl=False)


@main.command("server")
def server_command() -> None:
    """Run the language server for editors (LSP over stdio; needs pygls: `pip install '.[lsp]'` in a checkout)."""
    from amp_lint.server import serve

    sys.exit(serve())


@main.command("clean")
@click.option("--cache-dir", type=click.Path(file_okay=False), envvar="AMP_LINT_CACHE_DIR")
def clean_command(cache_dir: Optional[str]) -> None:
    """Remove the result cache (the project root's, as `check` uses it, also from a subfolder)."""
    from amp_lint.files.cache import clean, default_cache_dir

    outcome, message = clean(cache_dir or default_cache_dir(os.getcwd()))
    click.echo(message, err=outcome in ("refused", "failed"))
    sys.exit(EXIT_ERROR if outcome == "failed" else EXIT_CLEAN)


@main.command("generate-shell-completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish", "powershell"]))
def completion_command(shell: str) -> None:
    """Print the shell completion script for SHELL (as `ruff generate-shell-completion` does).

    bash: `eval "$(amp-lint generate-shell-completion bash)"` in ~/.bashrc; zsh: the same with zsh in ~/.zshrc;
    fish: `amp-lint generate-shell-completion fish > ~/.config/fish/completions/amp-lint.fish`; PowerShell:
    `amp-lint generate-shell-completion powershell | Out-String | Invoke-Expression` in $PROFILE.
    """
    from click.shell_completion import get_completion_class

    completion = get_completion_class(shell)(main, {}, "amp-lint", "_AMP_LINT_COMPLETE")
    click.echo(completion.source())
