"""Discovery: which files a run checks. Command-line paths are expanded into the Python files under them,
skipping what the settings exclude and what git ignores; a run with a result cache remembers each folder's
listing and decisions by the folder's `stat` (`amp_lint.files.walk_index`), so that a warm run lists and
tests again only the folders that changed.
"""

from __future__ import annotations

import errno
import operator
import os
import stat
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from amp_lint.diagnostics import FileError
from amp_lint.files.config import CONFIG_NAMES, note_no_config_files
from amp_lint.files.settings import Settings, exclusion_test, is_excluded
from amp_lint.files.sources import PYTHON_SUFFIXES, SourceError, _file_id, read_bytes

def discover(
    paths: Sequence[str],
    settings_for: Callable[[Path], Settings],
    *,
    force_exclude: bool = False,
    on_many_bytes: Optional[Tuple[int, Callable[[], None]]] = None,
    on_warning: Optional[Callable[[FileError], None]] = None,
    as_text: bool = False,
    index=None,
    stats: Optional[Dict[str, os.stat_result]] = None,
) -> Tuple[list, List[FileError]]:
    """Expand command-line paths into the files to check, sorted and without duplicates.

    Folders are walked for `.py`, `.pyi` and `.ipynb` files, skipping `exclude`/`extend_exclude`
    matches and, inside a git work tree, what `.gitignore` files and `.git/info/exclude` ignore.
    A path named on the command line is always checked (whatever its suffix) unless `force_exclude`
    (the argument or the path's settings) is set: then the exclude globs apply to it and its parent
    folders too, as pre-commit needs; `.gitignore` never applies to a named path.
    `settings_for` is called once per folder (and per named file); problems become `FileError`s
    and the walk goes on. `on_many_bytes`, (size, callback): the callback runs once, as soon as the files
    found add up to that many bytes (the runner starts its workers then, while the walk goes on).

    What an editor or a checkout leaves behind in a walked folder is not the user's mistake, and, as with
    Ruff, it does not fail the run: a broken `.py` symlink (Emacs' lock files `.#x.py`) or a file symlink
    loop is a warning (`on_warning`; by default a line on stderr), and a folder symlink that leads back to
    a folder being walked is skipped silently. Named on the command line, each is an error.

    The files are Paths, or with `as_text` the strings their Paths print (a run's plan wants strings).
    `index`: a `walk_index.WalkIndex`, whose folders unchanged since it was filled are not listed again (and
    which remembers the folders listed now); `stats`: a dict filled with the `stat` of each file found, by
    the name it has in the result.
    """
    walker = _Walker(settings_for, on_many_bytes, on_warning or _warn_on_stderr, index, stats)
    for argument in paths:
        walker.add(Path(argument), force_exclude)
    files = _in_path_order(walker.files)
    return (files if as_text else [Path(file) for file in files]), walker.errors


def _child_prefix(folder: Path) -> Optional[str]:
    """What `str(folder / name)` is `name` appended to, on POSIX (None elsewhere: a drive, `C:name`)."""
    if os.name != "posix":
        return None
    text = str(folder)
    if text == ".":
        return ""  # Path(".") / "a.py" is "a.py"
    return text if text.endswith("/") else text + "/"


def _in_path_order(files: List[str]) -> List[str]:
    """The paths sorted as their `Path`s sort (component by component: `a/x.py` before `a-b/x.py`), without
    building a Path for each where every path is absolute or every one relative (then both orders agree on
    POSIX, whatever the Python version)."""
    if os.name == "posix" and not any(file.startswith("//") for file in files):
        absolute = [file.startswith("/") for file in files]
        if all(absolute) or not any(absolute):
            return sorted(files, key=_components)
    return [str(path) for path in sorted(Path(file) for file in files)]


def _components(file: str) -> List[str]:
    return file.split("/")


def excluded_by_settings(path: Path, settings_for: Callable[[Path], Settings]) -> bool:
    """Would `--force-exclude` skip this file (or a folder it sits in)? For `--stdin-filename`, which
    names a file that need not exist: editors and pre-commit pass the real name of the buffer."""
    return _Walker(settings_for)._excluded_with_parents(path)


# A parsed .gitignore (a pathspec.GitIgnoreSpec) and the folder its patterns are relative to.
_IgnoreRule = Tuple[Path, object]
# The rules in force in a folder, shallowest first; None outside a git work tree.
_IgnoreRules = Optional[Tuple[_IgnoreRule, ...]]
_FileId = Tuple[int, int]  # (st_dev, st_ino): the same file reached by two paths is checked once
# A folder still to walk, its ignore rules, and its `stat`.
_PendingFolder = Tuple[Path, _IgnoreRules, Optional[os.stat_result]]
# The names in a folder that change how the walk decides on its entries, besides the settings.
_SPECIAL_NAMES = frozenset({".git", ".gitignore", *CONFIG_NAMES})


class _Walker:
    def __init__(
        self,
        settings_for: Callable[[Path], Settings],
        on_many_bytes: Optional[Tuple[int, Callable[[], None]]] = None,
        on_warning: Optional[Callable[[FileError], None]] = None,
        index=None,
        stats: Optional[Dict[str, os.stat_result]] = None,
    ) -> None:
        self._settings_for = settings_for
        self._index = index  # a `walk_index.WalkIndex`, or None: list every folder
        self._stats = stats  # filled with each file's `stat`, when given (the runner needs no second one)
        self._warnings = 0
        self._contexts: Dict[Tuple[int, int], tuple] = {}
        self._rule_signatures: Dict[int, Optional[str]] = {}
        self._rule_specs: List[object] = []
        self._on_warning = on_warning or _warn_on_stderr
        self._on_many_bytes = on_many_bytes
        self._bytes_found = 0
        self._settings: Dict[Path, Settings] = {}
        self._exclusion_tests: Dict[int, Tuple[Settings, Callable[[str], bool]]] = {}
        self._cwd = Path.cwd()  # the root of relative exclude globs when the settings have none
        self._seen_files: Set[_FileId] = set()
        self._walked_folders: Set[_FileId] = set()
        self.files: List[str] = []  # as `str(Path)` prints each (a walk builds thousands: no Path objects)
        self.errors: List[FileError] = []

    def add(self, path: Path, force_exclude: bool) -> None:
        try:
            info = path.stat()
        except OSError:
            self._error(path, _describe_unreachable(path))
            return
        if (force_exclude or self._settings_of(path).force_exclude) and self._excluded_with_parents(path):
            return
        if stat.S_ISDIR(info.st_mode):
            self._walk(path, info)
        elif not stat.S_ISREG(info.st_mode):
            # A FIFO named `x.py` would block the read; a device or socket is no source file either.
            self._error(path, "not a regular file")
        else:
            self._add_file(path, info)

    def _walk(self, top: Path, info: os.stat_result) -> None:
        """Depth-first walk without recursion, so that deep trees cannot overflow the stack."""
        if _file_id(info) in self._walked_folders:
            return
        self._walked_folders.add(_file_id(info))
        ignore_rules = self._gitignores_above(top)
        pending: List[_PendingFolder] = [(top, ignore_rules, info)]
        while pending:
            folder, ignore_rules, folder_info = pending.pop()
            if self._index is not None and self._walk_remembered(folder, ignore_rules, folder_info, pending):
                continue
            self._scan(folder, ignore_rules, folder_info, pending)

    def _scan(self, folder: Path, ignore_rules: _IgnoreRules, folder_info, pending: List[_PendingFolder]) -> None:
        """List one folder and decide on each entry; with a walk index, remember the listing and the decisions
        (`amp_lint.files.walk_index`) when nothing went wrong."""
        problems = len(self.errors) + self._warnings
        try:
            with os.scandir(folder) as scan:
                entries = list(scan)
        except OSError as exc:
            self._error(folder, exc.strerror or str(exc))
            return
        if entries and not os.access(folder, os.X_OK):
            # Readable but not searchable (mode 644): its names can be listed, nothing in it opened.
            self._error(folder, "Permission denied (the folder can be listed but not searched)")
            return
        settings = self._settings_of(folder)
        special = "".join(sorted(entry.name + "\n" for entry in entries if entry.name in _SPECIAL_NAMES))
        # A symbolic link's kind follows its target, which can change without this folder changing: a folder
        # with one the walk does not keep (a link to nothing yet, or to a file without a Python suffix) is not
        # remembered. Links the walk keeps are checked again each time (`_walk_remembered`).
        links = {entry.name for entry in entries if entry.is_symlink()} if self._index is not None else ()
        if settings.respect_gitignore:
            ignore_rules = self._folder_gitignores(folder, {entry.name for entry in entries}, ignore_rules)
        excluded = self._exclusion_test(settings)
        # Strings, not pathlib, for what is asked of every entry: a walk of torch's package asks 13,000 times.
        absolute_folder = os.path.join(os.path.abspath(folder), "")
        # A file's path as `folder / name` names it, built as a string (`_child_prefix`).
        file_prefix = _child_prefix(folder)
        subfolders = []
        kept: List[str] = []  # what the walk index remembers: "d" or "f", then the name
        # Only folders and Python files, in name order: most entries of a tree (headers, data) are neither,
        # and are dropped before the sort and before any question to the exclude globs.
        entries = sorted(filter(_folder_or_python_file, entries), key=_entry_name)
        for entry in entries:
            try:
                is_folder = entry.is_dir()
            except OSError:  # a symlink loop, say; described below
                is_folder = False
            if not is_folder and os.path.splitext(entry.name)[1] not in PYTHON_SUFFIXES:
                continue
            absolute = absolute_folder + entry.name
            if excluded(absolute) or (
                settings.respect_gitignore and ignore_rules and _gitignored(Path(absolute), is_folder, ignore_rules)
            ):
                continue
            try:
                is_file = not is_folder and entry.is_file()
            except OSError:
                is_file = False
            if is_folder:
                kept.append("d" + entry.name)
                subfolders.append(self._enter(folder / entry.name, entry, ignore_rules))
            else:
                path = file_prefix + entry.name if file_prefix is not None else str(folder / entry.name)
                if is_file:
                    kept.append("f" + entry.name)
                    try:
                        self._add_file(path, entry.stat())
                    except OSError as exc:
                        self._error(Path(path), exc.strerror or str(exc))
                elif entry.is_symlink():
                    self._warn(FileError(path, _describe_unreachable(Path(path)) + "; skipped"))
        # Reversed so that the stack pops the subfolders in name order.
        pending.extend(reversed([item for item in subfolders if item is not None]))
        unkept_link = any(("d" + name not in kept and "f" + name not in kept) for name in links)
        if self._index is not None and folder_info is not None and len(self.errors) + self._warnings == problems and not unkept_link:
            self._index.remember(
                absolute_folder, folder_info, self._context(settings, ignore_rules, absolute_folder, special), special, kept
            )

    def _walk_remembered(self, folder: Path, ignore_rules: _IgnoreRules, folder_info, pending: List[_PendingFolder]) -> bool:
        """Walk a folder as the walk index remembers it, if its `stat` and the settings and ignore files that
        decided on its entries are unchanged: one `stat` per entry kept, no listing, no question to the exclude
        globs or the ignore files. False (nothing done) where anything differs: the folder is listed again."""
        if folder_info is None:
            return False
        absolute_folder = os.path.join(os.path.abspath(folder), "")
        remembered = self._index.recall(absolute_folder, folder_info)
        if remembered is None:
            return False
        special, kept = remembered
        if not any(name + "\n" in special for name in CONFIG_NAMES):
            note_no_config_files(absolute_folder[:-1] if len(absolute_folder) > 1 else absolute_folder)
        settings = self._settings_of(folder)
        if settings.respect_gitignore:
            ignore_rules = self._folder_gitignores(folder, set(special.split("\n")), ignore_rules)
        if not self._index.same_context(absolute_folder, self._context(settings, ignore_rules, absolute_folder, special)):
            return False
        # Every kept entry is still what it was (a link's target may have changed without the folder changing):
        # checked before anything is added, so that a folder listed again is not half added already.
        infos = []
        for item in kept:
            try:
                info = os.stat(absolute_folder + item[1:])
            except OSError:
                return False
            if not (stat.S_ISDIR(info.st_mode) if item[0] == "d" else stat.S_ISREG(info.st_mode)):
                return False
            infos.append(info)
        self._index.keep(absolute_folder)
        file_prefix = _child_prefix(folder)
        subfolders = []
        for item, info in zip(kept, infos):
            name = item[1:]
            if item[0] == "d":
                folder_id = _file_id(info)
                if folder_id not in self._walked_folders:  # a link back to a folder of the walk, or walked already
                    self._walked_folders.add(folder_id)
                    subfolders.append((folder / name, ignore_rules, info))
            else:
                self._add_file(file_prefix + name if file_prefix is not None else str(folder / name), info)
        pending.extend(reversed(subfolders))
        return True

    def _context(self, settings: Settings, ignore_rules: _IgnoreRules, absolute_folder: str, special: str) -> str:
        """What decided on a folder's entries besides its listing: the exclude globs and their root, whether
        ignore files count, and each ignore file in force with its `stat` (a walk index entry holds it); at a
        work tree's root, also the `stat` of `.git/info/exclude`, which can appear without the folder changing."""
        key = (id(settings), id(ignore_rules))
        found = self._contexts.get(key)
        if found is None or found[0] is not settings or found[1] is not ignore_rules:
            files = tuple((str(base), self._rule_signatures.get(id(spec))) for base, spec in ignore_rules or ())
            described = repr(
                (settings.exclude + settings.extend_exclude, str(self._root(settings)), settings.respect_gitignore, files)
            )
            found = self._contexts[key] = (settings, ignore_rules, described)
        if settings.respect_gitignore and ".git\n" in special:
            return found[2] + repr(_signature_of(absolute_folder + ".git/info/exclude"))
        return found[2]

    def _enter(
        self, path: Path, entry: os.DirEntry, ignore_rules: _IgnoreRules
    ) -> Optional[_PendingFolder]:
        """The stack item for a subfolder, or None where a symlink leads to a folder of the walk (a loop)."""
        try:
            info = entry.stat()
            folder_id = _file_id(info)
        except OSError as exc:
            self._error(path, exc.strerror or str(exc))
            return None
        if folder_id in self._walked_folders:  # a link back to a folder of the walk (a loop), or walked already
            return None
        self._walked_folders.add(folder_id)
        return path, ignore_rules, info

    def _add_file(self, path, info: os.stat_result) -> None:
        """`path`: a Path, or the string a Path would print."""
        file_id = _file_id(info)
        if file_id not in self._seen_files:
            self._seen_files.add(file_id)
            self.files.append(str(path))
            if self._stats is not None:
                self._stats[str(path)] = info
            if self._on_many_bytes is not None:
                self._bytes_found += info.st_size
                if self._bytes_found >= self._on_many_bytes[0]:
                    callback, self._on_many_bytes = self._on_many_bytes[1], None
                    callback()

    def _warn(self, warning: FileError) -> None:
        self._warnings += 1
        self._on_warning(warning)

    def _error(self, path: Path, message: str) -> None:
        self.errors.append(FileError(str(path), message))

    @staticmethod
    def _absolute(path: Path) -> Path:
        return Path(os.path.abspath(path))

    def _settings_of(self, path: Path) -> Settings:
        if path not in self._settings:
            self._settings[path] = self._settings_for(path)
        return self._settings[path]

    def _root(self, settings: Settings) -> Path:
        return Path(os.path.abspath(settings.root)) if settings.root else self._cwd

    def _exclusion_test(self, settings: Settings) -> Callable[[str], bool]:
        """`_excluded` for one settings object, as a test of an absolute, normalized path (a string)."""
        test = self._exclusion_tests.get(id(settings))
        if test is None or test[0] is not settings:
            patterns = settings.exclude + settings.extend_exclude
            root = str(self._root(settings))
            test = self._exclusion_tests[id(settings)] = (settings, exclusion_test(patterns, root))
        return test[1]

    def _excluded(self, path: Path, settings: Settings) -> bool:
        """Ruff's exclude semantics (`amp_lint.files.settings.is_excluded`): a pattern made absolute against
        the settings' root (or the cwd) matches the absolute path; a pattern without `/` matches the name.

        A bare-name glob never matches the absolute path: `*test*` must not exclude a whole project that
        lives in /tmp/tests.
        """
        absolute = os.path.abspath(path)  # strings, not pathlib: a walk asks this for every file
        return is_excluded(absolute, settings.exclude + settings.extend_exclude, str(self._root(settings)))

    def _excluded_with_parents(self, path: Path) -> bool:
        """For --force-exclude: `build/x.py` is excluded by `build`, so the parents count too."""
        settings = self._settings_of(path)
        absolute = self._absolute(path)
        root = self._root(settings)
        candidates = [absolute] + [parent for parent in absolute.parents if root in parent.parents]
        return any(self._excluded(candidate, settings) for candidate in candidates)

    def _gitignores_above(self, top: Path) -> _IgnoreRules:
        """The ignore files that apply to `top` from the folders above it, up to its work tree's root.

        None outside a git work tree: there `.gitignore` files mean nothing, as for git itself.
        """
        if not self._settings_of(top).respect_gitignore:
            return None
        above = list(self._absolute(top).parents)
        repository = next((folder for folder in above if (folder / ".git").exists()), None)
        if repository is None:
            return None
        rules = self._load_gitignore(repository / ".git" / "info" / "exclude", repository)
        for folder in reversed(above):
            if folder == repository or repository in folder.parents:
                rules += self._load_gitignore(folder / ".gitignore", folder)
        if rules and _gitignored(self._absolute(top), True, rules):
            # A folder named on the command line is checked even if git ignores it (`.venv/.../torch`):
            # naming it says so. Ignore files inside it still apply.
            return None
        return rules

    def _folder_gitignores(self, folder: Path, names: Set[str], inherited: _IgnoreRules) -> _IgnoreRules:
        """The ignore rules inside `folder`: a work tree's root (or a submodule) starts afresh."""
        rules = inherited
        if ".git" in names:
            rules = self._load_gitignore(folder / ".git" / "info" / "exclude", folder)
        if rules is not None and ".gitignore" in names:
            rules += self._load_gitignore(folder / ".gitignore", folder)
        return rules

    def _load_gitignore(self, ignore_file: Path, base: Path) -> Tuple[_IgnoreRule, ...]:
        # As configuration files are read: without blocking (a FIFO), regular files only (`/dev/zero`), bounded.
        signature = _signature_of(str(ignore_file))  # before the read: a change after it is seen next time
        try:
            raw = read_bytes(str(ignore_file), _IGNORE_FILE_BYTES)
        except SourceError as exc:
            if isinstance(exc.__cause__, (FileNotFoundError, NotADirectoryError)):
                return ()  # `.git` is a file in submodules and worktrees
            self._error(ignore_file, f"{exc.message}; its patterns are not applied")
            return ()
        lines = raw.decode("utf-8", errors="replace").splitlines()
        import pathspec  # only where a project has ignore files: keeps a plain run's start-up fast

        try:
            spec = pathspec.GitIgnoreSpec.from_lines(lines)
        except ValueError:
            # A line git accepts but pathspec refuses (`!` or `\` alone): git matches nothing with it.
            spec = pathspec.GitIgnoreSpec.from_lines([line for line in lines if _valid_gitignore_line(pathspec, line)])
        self._rule_signatures[id(spec)] = signature
        self._rule_specs.append(spec)  # kept alive: its id names it in `_rule_signatures`
        return ((self._absolute(base), spec),)


# git reads ignore files of any size; one this big is not a list of patterns someone wrote.
_IGNORE_FILE_BYTES = 4 * 1024 * 1024


def _valid_gitignore_line(pathspec, line: str) -> bool:
    try:
        pathspec.GitIgnoreSpec.from_lines([line])
    except ValueError:
        return False
    return True


def _gitignored(path: Path, is_folder: bool, ignore_rules: Sequence[_IgnoreRule]) -> bool:
    """The deepest ignore file with a matching pattern decides, as in git (`!` patterns re-include)."""
    for base, spec in reversed(ignore_rules):
        relative = path.relative_to(base).as_posix() + ("/" if is_folder else "")
        verdict = spec.check_file(relative).include
        if verdict is not None:
            return verdict
    return False


def _warn_on_stderr(warning: FileError) -> None:
    import sys

    sys.stderr.write(f"{warning.filename}: warning: {warning.message}\n")


_PYTHON_SUFFIX_TUPLE = tuple(PYTHON_SUFFIXES)
_entry_name = operator.attrgetter("name")


def _folder_or_python_file(entry: os.DirEntry) -> bool:
    """Could the walk keep this entry (a folder, or a name with a Python suffix)? A cheap first look: a name
    that does not even end in a Python suffix is asked only whether it is a folder (from the folder listing's
    file type, without a `stat` in most file systems); the walk then asks again exactly."""
    if entry.name.endswith(_PYTHON_SUFFIX_TUPLE):
        return True
    try:
        return entry.is_dir()
    except OSError:  # a symlink loop, say: the walk describes it if it is a Python file, and it is not
        return False



def _signature_of(path: str) -> Optional[str]:
    """The `stat` of a file a walk decision rests on, as a string (None: there is none)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"


def _describe_unreachable(path: Path) -> str:
    """Why `path` cannot be stat'ed: missing, a broken link, a link loop, or what the OS says."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop; not followed"
        if exc.errno == errno.ENOENT and path.is_symlink():
            return f"broken symbolic link (to {os.readlink(path)})"
        return exc.strerror or str(exc)
    return "not a regular file"
