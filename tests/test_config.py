"""Configuration files: discovery, reading, error messages, and layering with the command line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from amp_lint.files import config
from amp_lint.files.config import ConfigError, SettingsResolver, describe, find_config, load_config
from amp_lint.files.settings import DEFAULT_EXCLUDES, RuleSelection, Settings

CODES = ["AMP001", "AMP010", "AMP011", "AMP020", "AMP021", "AMP070", "AMP071"]


@pytest.fixture(autouse=True)
def fresh_discovery_cache():
    config._config_above.cache_clear()
    yield
    config._config_above.cache_clear()


def write(path: Path, content: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(content), encoding="utf-8")
    return path


def config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, CODES)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- discovery ---------------------------------------------------------------------------------


def test_closest_folder_wins(tmp_path):
    outer = write(tmp_path / "amp-lint.toml", "")
    inner = write(tmp_path / "pkg" / "sub" / "pyproject.toml", "[tool.amp-lint]\n")
    write(tmp_path / "pkg" / "sub" / "deeper" / "train.py", "")
    write(tmp_path / "pkg" / "other.py", "")
    assert find_config(tmp_path / "pkg" / "sub" / "deeper" / "train.py") == inner
    assert find_config(tmp_path / "pkg" / "other.py") == outer
    assert find_config(tmp_path / "pkg") == outer
    assert find_config(tmp_path / "pkg" / "sub") == inner


def test_pyproject_without_the_table_is_skipped(tmp_path):
    outer = write(tmp_path / "pyproject.toml", "[tool.amp-lint]\nselect = ['AMP0']\n")
    write(tmp_path / "pkg" / "pyproject.toml", "[project]\nname = 'pkg'\ndependencies = ['amp-lint']\n")
    write(tmp_path / "pkg" / "train.py", "")
    assert find_config(tmp_path / "pkg" / "train.py") == outer


def test_first_config_name_in_a_folder_wins(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.amp-lint]\n")
    write(tmp_path / "amp-lint.toml", "")
    assert find_config(tmp_path) == tmp_path / "amp-lint.toml"
    config._config_above.cache_clear()
    hidden = write(tmp_path / ".amp-lint.toml", "")
    assert find_config(tmp_path) == hidden


def test_invalid_pyproject_that_mentions_amp_lint_is_not_skipped(tmp_path):
    broken = write(tmp_path / "pyproject.toml", "[tool.amp-lint\n")
    assert find_config(tmp_path / "train.py") == broken
    assert "invalid TOML" in config_error(broken)


def test_a_relative_path_is_looked_up_from_the_working_folder(tmp_path, monkeypatch):
    found = write(tmp_path / "amp-lint.toml", "")
    monkeypatch.chdir(tmp_path)
    assert find_config(Path("train.py")) == found


def test_discovery_is_cached_per_folder(tmp_path, monkeypatch):
    write(tmp_path / "amp-lint.toml", "")
    looked_in = []
    real = config._config_in
    monkeypatch.setattr(config, "_config_in", lambda folder: looked_in.append(folder) or real(folder))
    for name in ("a.py", "b.py", "c.py"):
        find_config(tmp_path / "src" / name)
    assert looked_in == [str(tmp_path / "src"), str(tmp_path)]


# --- reading -----------------------------------------------------------------------------------


def test_every_key_maps_to_a_setting(tmp_path):
    path = write(
        tmp_path / "amp-lint.toml",
        """
        select = ["AMP0"]
        ignore = ["AMP011"]
        extend-select = ["AMP070"]
        exclude = ["generated"]
        extend-exclude = ["third_party/*"]
        respect-gitignore = false
        force-exclude = true
        fix = true
        unsafe-fixes = true
        output-format = "sarif"
        amp-dtype = "bfloat16"
        amp-device = "xpu"

        [per-file-ignores]
        "tests/*" = ["AMP001", "AMP02"]
        "legacy.py" = ["AMP07"]
        """,
    )
    assert load_config(path, CODES) == Settings(
        select=("AMP0",),
        ignore=("AMP011",),
        extend_select=("AMP070",),
        per_file_ignores=(("tests/*", ("AMP001", "AMP02")), ("legacy.py", ("AMP07",))),
        exclude=("generated",),
        extend_exclude=("third_party/*",),
        respect_gitignore=False,
        force_exclude=True,
        fix=True,
        unsafe_fixes=True,
        output_format="sarif",
        amp_dtype="bfloat16",
        amp_device="xpu",
        source=str(path),
        root=str(tmp_path),
    )


def test_pyproject_keys_sit_under_tool_amp_lint(tmp_path):
    path = write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n\n[tool.amp-lint]\nignore = ['AMP070']\n")
    settings = load_config(path, CODES)
    assert settings.ignore == ("AMP070",)
    assert settings.source == str(path)


def test_an_empty_file_gives_the_defaults(tmp_path):
    path = write(tmp_path / "amp-lint.toml", "")
    assert load_config(path, CODES) == Settings(source=str(path), root=str(tmp_path))


def test_exclude_replaces_the_defaults_and_extend_exclude_adds(tmp_path):
    replaced = load_config(write(tmp_path / "a" / "amp-lint.toml", "exclude = ['gen']\n"), CODES)
    extended = load_config(write(tmp_path / "b" / "amp-lint.toml", "extend-exclude = ['gen']\n"), CODES)
    assert replaced.exclude == ("gen",)
    assert extended.exclude == DEFAULT_EXCLUDES
    assert extended.extend_exclude == ("gen",)


def test_per_file_ignores_apply_relative_to_the_config_folder(tmp_path):
    path = write(tmp_path / "amp-lint.toml", '[per-file-ignores]\n"tests/*" = ["AMP01", "AMP02"]\n')
    settings = load_config(path, CODES)
    selection = RuleSelection.from_settings(settings, CODES, CODES)
    assert selection.for_path(str(tmp_path / "tests" / "test_x.py"), settings, CODES) == {"AMP001", "AMP070", "AMP071"}
    assert selection.for_path(str(tmp_path / "src" / "train.py"), settings, CODES) == set(CODES)


# --- error messages ----------------------------------------------------------------------------


def test_unknown_key_in_pyproject_suggests_the_closest(tmp_path):
    path = write(tmp_path / "pyproject.toml", "[tool.amp-lint]\nselct = ['AMP001']\n")
    assert config_error(path) == f"{path}: unknown key 'selct' in [tool.amp-lint] (did you mean 'select'?)"


def test_unknown_key_in_amp_lint_toml(tmp_path):
    path = write(tmp_path / "amp-lint.toml", "extend_select = ['AMP001']\n")
    assert config_error(path) == f"{path}: unknown key 'extend_select' (did you mean 'extend-select'?)"
    path = write(tmp_path / "amp-lint.toml", "colour = true\n")
    assert config_error(path) == f"{path}: unknown key 'colour'"


@pytest.mark.parametrize(
    "content, message",
    [
        ("select = 1", "'select' must be a list of strings, got integer"),
        ("select = 'AMP001'", "'select' must be a list of strings, got string"),
        ("ignore = ['AMP001', 2]", "'ignore' must be a list of strings, got integer"),
        ("exclude = [{a = 1}]", "'exclude' must be a list of strings, got table"),
        ("respect-gitignore = 'no'", "'respect-gitignore' must be true or false, got string"),
        ("unsafe-fixes = 1", "'unsafe-fixes' must be true or false, got integer"),
        ("per-file-ignores = ['AMP001']", "'per-file-ignores' must be a table of glob = [codes], got array"),
        ("per-file-ignores = {'a.py' = 'AMP001'}", "'per-file-ignores' must be a list of strings, got string"),
        ("amp-device = 3.5", "'amp-device' must be a non-empty string, got float"),
        ("amp-dtype = 'float32'", "'amp-dtype' must be one of float16, bfloat16, got 'float32'"),
        ("amp-dtype = 16", "'amp-dtype' must be one of float16, bfloat16, got integer"),
        (
            "output-format = 'xml'",
            "'output-format' must be one of full, concise, grouped, json, json-lines, github, sarif, junit, "
            "gitlab, pylint, got 'xml'",
        ),
    ],
)
def test_wrong_types_name_the_key_and_the_type(tmp_path, content, message):
    path = write(tmp_path / "amp-lint.toml", content + "\n")
    assert config_error(path) == f"{path}: {message}"


@pytest.mark.parametrize(
    "content, message",
    [
        ("ignore = ['AMP999']", "unknown rule code 'AMP999' in 'ignore'"),
        ("select = ['AMP0', 'XYZ']", "unknown rule code 'XYZ' in 'select'"),
        ("extend-select = ['AMP9']", "unknown rule code 'AMP9' in 'extend-select'"),
        (
            "[per-file-ignores]\n'tests/*' = ['AMP999']",
            "unknown rule code 'AMP999' in 'per-file-ignores' for 'tests/*'",
        ),
    ],
)
def test_unknown_rule_codes(tmp_path, content, message):
    path = write(tmp_path / "amp-lint.toml", content + "\n")
    assert config_error(path) == f"{path}: {message}"


def test_prefixes_and_all_are_accepted(tmp_path):
    path = write(tmp_path / "amp-lint.toml", "select = ['ALL', 'amp0', 'AMP07']\n")
    assert load_config(path, CODES).select == ("ALL", "amp0", "AMP07")


def test_invalid_toml(tmp_path):
    path = write(tmp_path / "amp-lint.toml", "select = ['AMP001']\nignore = \n")
    assert config_error(path) == f"{path}: invalid TOML: Invalid value (at line 2, column 10)"


def test_tool_amp_lint_must_be_a_table(tmp_path):
    path = write(tmp_path / "pyproject.toml", "[tool]\namp-lint = 1\n")
    assert config_error(path) == f"{path}: 'tool.amp-lint' must be a table, got integer"


def test_unreadable_config(tmp_path):
    assert config_error(tmp_path / "missing.toml").startswith(f"{tmp_path / 'missing.toml'}: cannot read: ")


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# --- resolving ---------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path):
    """A project ignoring AMP070 at the top and selecting only AMP01 in `sub/`."""
    write(tmp_path / "pyproject.toml", "[tool.amp-lint]\nignore = ['AMP070']\noutput-format = 'concise'\n")
    write(tmp_path / "sub" / "amp-lint.toml", "select = ['AMP01']\nextend-select = ['AMP071']\n")
    return tmp_path


def test_each_file_gets_its_folder_config(project):
    resolver = SettingsResolver({}, all_codes=CODES)
    assert resolver.for_path(project / "train.py").ignore == ("AMP070",)
    assert resolver.for_path(project / "sub" / "train.py").select == ("AMP01",)
    assert resolver.for_path(project / "sub" / "train.py").source == str(project / "sub" / "amp-lint.toml")


def test_no_config_gives_defaults(tmp_path):
    resolver = SettingsResolver({"unsafe_fixes": True}, all_codes=CODES)
    assert resolver.for_path(tmp_path / "train.py") == Settings(unsafe_fixes=True)


def test_command_line_overrides_the_config(project):
    resolver = SettingsResolver({"output_format": "json", "amp_dtype": "bfloat16"}, all_codes=CODES)
    settings = resolver.for_path(project / "train.py")
    assert (settings.output_format, settings.amp_dtype, settings.ignore) == ("json", "bfloat16", ("AMP070",))


def test_command_line_ignore_and_extend_select_add_to_the_config(project):
    resolver = SettingsResolver({"ignore": ("AMP001",), "extend_select": ("AMP070",)}, all_codes=CODES)
    assert resolver.for_path(project / "train.py").ignore == ("AMP070", "AMP001")
    assert resolver.for_path(project / "sub" / "x.py").extend_select == ("AMP071", "AMP070")


def test_command_line_select_starts_the_selection_afresh(project):
    resolver = SettingsResolver({"select": ("AMP070",)}, all_codes=CODES)
    settings = resolver.for_path(project / "sub" / "x.py")
    assert (settings.select, settings.extend_select, settings.ignore) == (("AMP070",), (), ())
    assert RuleSelection.from_settings(settings, CODES, CODES).enabled == {"AMP070"}


def test_config_option_applies_to_every_file(project, tmp_path_factory):
    chosen = write(tmp_path_factory.mktemp("elsewhere") / "custom.toml", "select = ['AMP02']\n")
    resolver = SettingsResolver({}, config_path=chosen, all_codes=CODES)
    for path in (project / "train.py", project / "sub" / "x.py"):
        assert resolver.for_path(path).select == ("AMP02",)
        assert resolver.for_path(path).root == str(chosen.parent)


def test_isolated_ignores_every_config_file(project):
    resolver = SettingsResolver({"ignore": ("AMP001",)}, isolated=True, all_codes=CODES)
    settings = resolver.for_path(project / "sub" / "x.py")
    assert settings == Settings(ignore=("AMP001",))
    assert resolver.root_settings(project).output_format == "full"


def test_config_and_isolated_together_are_refused(project):
    with pytest.raises(ConfigError, match="--config and --isolated"):
        SettingsResolver({}, config_path=project / "pyproject.toml", isolated=True, all_codes=CODES)


def test_root_settings_are_those_of_the_working_folder(project):
    resolver = SettingsResolver({}, all_codes=CODES)
    assert resolver.root_settings(project).output_format == "concise"
    assert resolver.root_settings(project / "sub").select == ("AMP01",)


def test_each_config_file_is_read_once(project, monkeypatch):
    loaded = []
    real = config.load_config
    monkeypatch.setattr(config, "load_config", lambda path, codes: loaded.append(path) or real(path, codes))
    resolver = SettingsResolver({}, all_codes=CODES)
    for name in ("a.py", "b.py", "sub/c.py", "sub/d.py", "e.py"):
        resolver.for_path(project / name)
    assert loaded == [project / "pyproject.toml", project / "sub" / "amp-lint.toml"]


def test_config_errors_surface_from_the_resolver(tmp_path):
    write(tmp_path / "amp-lint.toml", "selct = []\n")
    with pytest.raises(ConfigError, match="did you mean 'select'"):
        SettingsResolver({}, all_codes=CODES).for_path(tmp_path / "train.py")


# --- --show-settings ---------------------------------------------------------------------------


def test_describe_names_the_source_first(project):
    settings = SettingsResolver({}, all_codes=CODES).for_path(project / "train.py")
    lines = describe(settings).splitlines()
    assert lines[0] == f"# Settings from {project / 'pyproject.toml'}"
    assert 'ignore = ["AMP070"]' in lines
    assert 'output-format = "concise"' in lines
    assert describe(Settings()).startswith("# Default settings (no configuration file)\n")


def test_describe_is_toml_that_loads_back_to_the_same_settings(tmp_path):
    settings = Settings(
        select=("AMP0",),
        per_file_ignores=(("tests/*", ("AMP001",)), ('we"ird.py', ("AMP07",))),
        respect_gitignore=False,
        amp_device="cuda",
    )
    path = write(tmp_path / "amp-lint.toml", describe(settings))
    assert load_config(path, CODES) == settings.with_changes(source=str(path), root=str(tmp_path))
