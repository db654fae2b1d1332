"""Bug injection on real code: how many documented AMP mistakes amp-lint catches, and fixes back.

It takes real, correct training code (pinned PyPI wheels, see bench/inject_corpus.py), injects one AMP mistake
at a time at a real site (operators in bench/inject_ops.py), and checks the mutated file in place inside a copy
of its project, so that whole-project analysis sees the rest. A mutant is caught when a default finding of the
operator's rule appears in the site's function that the original file did not have. With `--fix-back`, every
caught mutant is fixed (`--fix --select RULE`, `--unsafe-fixes` when that finding's fix is unsafe) and compared
with the original code (issue 27): restored, fixed otherwise, refused / not fixed, or broken.

    python bench/inject.py --jobs 2 --fix-back --out bench/results/inject-results.md

amp-lint runs under `--amp-lint-python` (default: this interpreter) through bench/inject_worker.py: one warm
process per job that forks a clean child per check, which is the CLI exactly as `python -m amp_lint` runs it.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import inject_corpus  # noqa: E402
import inject_report  # noqa: E402
from inject_compare import classify_fix, judge_catch, judge_through_callers, parse_findings  # noqa: E402
from inject_ops import OPERATORS, Mutant, may_hold_sites, mutants, own_scaler_classes  # noqa: E402

CHECK = ["--no-cache", "--isolated", "--show-assumed", "--output-format", "json", "--exit-zero", "-j", "1"]


class Worker:
    """One warm amp-lint process (bench/inject_worker.py) under the measured interpreter."""

    def __init__(self, python: str) -> None:
        self.process = subprocess.Popen(
            [python, str(HERE / "inject_worker.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )

    def run(self, cwd: Path, args: Sequence[str]) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"cwd": str(cwd), "args": list(args)}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the amp-lint worker died (is --amp-lint-python an interpreter with amp_lint?)")
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def check(worker: Worker, root: Path, file, extra: Sequence[str] = ()) -> dict:
    started = time.perf_counter()
    files = [file] if isinstance(file, str) else list(file)
    result = worker.run(root, [*CHECK, *extra, *files])
    result["findings"] = parse_findings(result["stdout"])
    result["seconds"] = time.perf_counter() - started
    return result


def find_mutants(projects: Dict[str, Path], operators: Sequence[str], cap: int, seed: int) -> List[Mutant]:
    """Every site of the chosen operators, at most `cap` per (project, operator), sampled with `seed`."""
    chosen: List[Mutant] = []
    for name, root in projects.items():
        per_op: Dict[str, List[Mutant]] = defaultdict(list)
        texts = {}
        for path in inject_corpus.python_files(root):
            try:
                texts[path] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        foreign = own_scaler_classes(list(texts.values()))
        for path, text in texts.items():
            if not may_hold_sites(text):
                continue
            for mutant in mutants(text, str(path.relative_to(root)), operators, foreign):
                per_op[mutant.operator].append(mutant)
        for op, found in sorted(per_op.items()):
            if cap and len(found) > cap:
                found = sorted(random.Random(f"{seed}:{name}:{op}").sample(found, cap), key=lambda m: (m.file, m.line))
            for mutant in found:
                mutant.project = name  # type: ignore[attr-defined]
                chosen.append(mutant)
    return chosen


def run_project(worker: Worker, name: str, source: Path, todo: List[Mutant], fix_back: bool, log, earlier=None) -> List[dict]:
    """Check `todo` (mutants of one project) in a temporary copy of the project, one at a time. `earlier`:
    {key: record} of a previous run whose verdicts are kept (only the fix-back of its caught ones runs)."""
    results = []
    with tempfile.TemporaryDirectory(prefix=f"inject-{name}-") as tmp:
        root = Path(tmp) / name
        shutil.copytree(source, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        by_file: Dict[str, List[Mutant]] = defaultdict(list)
        for mutant in todo:
            by_file[mutant.file].append(mutant)
        callers = Callers(worker, root)
        for file, file_mutants in sorted(by_file.items()):
            path = root / file
            original = path.read_text(encoding="utf-8")
            base = check(worker, root, file)
            before = base["findings"]
            if before is None:
                for mutant in file_mutants:
                    results.append(_record(mutant, error=f"original not checked: rc {base['rc']}: {base['stderr'][-400:]}"))
                continue
            for mutant in file_mutants:
                try:
                    path.write_text(mutant.text, encoding="utf-8")
                    record = (earlier or {}).get(key(_record(mutant, project=name)))
                    if record is None:
                        results.append(_one(worker, root, file, path, original, before, mutant, fix_back, callers))
                    else:
                        if record.get("caught") and "fix_back" not in record:
                            record["fix_back"] = fix_back_one(worker, root, file, path, original, before, mutant, record)
                        results.append(record)
                finally:
                    path.write_text(original, encoding="utf-8")
                log(results[-1])
    return results


class Callers:
    """The modules of a project copy that import a checked file's module: where amp-lint reports a bug of a
    per-call function (a step helper handed the scaler) that only its caller's iteration shows, at the
    call, naming the mutated line among its related places. A user checking the project sees it there."""

    LIMIT = 6  # importing modules checked per mutated file

    def __init__(self, worker: Worker, root: Path) -> None:
        self.worker, self.root = worker, root
        self._texts: Optional[Dict[str, str]] = None
        self._importers: Dict[str, List[str]] = {}
        self._before: Dict[str, Optional[List[dict]]] = {}

    def importers(self, file: str) -> List[str]:
        if file not in self._importers:
            if self._texts is None:
                self._texts = {}
                for path in inject_corpus.python_files(self.root):
                    try:
                        self._texts[str(path.relative_to(self.root))] = path.read_text(encoding="utf-8")
                    except (OSError, UnicodeDecodeError):
                        continue
            stem = Path(file).stem if Path(file).stem != "__init__" else Path(file).parent.name
            pattern = re.compile(r"^\s*(from\s+[\w.]*\b" + re.escape(stem) + r"\b\s+import|import\s+[\w.]*\b" + re.escape(stem) + r"\b)", re.M)
            found = [other for other, text in sorted(self._texts.items()) if other != file and pattern.search(text)]
            self._importers[file] = found[: self.LIMIT]
        return self._importers[file]

    def findings(self, file: str) -> Optional[List[dict]]:
        """The importers' findings, the checked file as written (once per file)."""
        if file not in self._before:
            others = self.importers(file)
            self._before[file] = check(self.worker, self.root, others)["findings"] if others else []
        return self._before[file]


def _one(worker, root, file, path, original, before, mutant, fix_back, callers: Optional[Callers] = None) -> dict:
    after_run = check(worker, root, file)
    after = after_run["findings"]
    if after is None:
        return _record(mutant, error=f"mutant not checked: rc {after_run['rc']}: {after_run['stderr'][-400:]}")
    verdict = judge_catch(mutant, original, before, after)
    if not verdict["caught"] and callers is not None and callers.importers(file):
        # Reported at a caller in another module, naming the mutated line among its related places: the
        # importers are checked with the original in place (once per file), then with the mutant.
        path.write_text(original, encoding="utf-8")
        try:
            others_before = callers.findings(file)
        finally:
            path.write_text(mutant.text, encoding="utf-8")
        others_after = check(worker, root, callers.importers(file))["findings"]
        if others_before is not None and others_after is not None:
            through = judge_through_callers(mutant, original, file, others_before, others_after)
            if through:
                verdict.update(caught=True, assumed_only=False, elsewhere=False, through_caller=through)
    record = _record(mutant, **verdict, seconds=round(after_run["seconds"], 2))
    if fix_back and verdict["caught"]:
        record["fix_back"] = fix_back_one(worker, root, file, path, original, before, mutant, verdict, after)
    return record


def fix_back_one(worker, root, file, path, original, before, mutant, verdict, mutant_findings=None) -> dict:
    flags = ["--fix", "--select", ",".join(mutant.expected)]
    if verdict.get("fix_applicability") == "unsafe":
        flags.append("--unsafe-fixes")
    path.write_text(mutant.text, encoding="utf-8")
    if mutant_findings is None:  # an earlier run's verdict: the mutant's own findings, checked again
        mutant_findings = check(worker, root, file)["findings"]
    run = worker.run(root, ["--no-cache", "--isolated", "--output-format", "json", "-j", "1", *flags, file])
    fixed = path.read_text(encoding="utf-8")
    if run["rc"] not in (0, 1, 2):
        return {"class": "broken", "why": f"amp-lint --fix exited {run['rc']}: {run['stderr'][-300:]}", "flags": flags}
    if _same_tree(fixed, original):
        return {"class": "restored", "why": "", "flags": flags}
    recheck = check(worker, root, file)
    after_fix = recheck["findings"] or []
    outcome = classify_fix(mutant, original, fixed, before, after_fix, run["stderr"], mutant_findings)
    if verdict.get("fix_applicability") is None and outcome["class"] in ("refused", "not fixed"):
        outcome["why"] = "no fix offered" + (f" ({outcome['why']})" if outcome.get("why") and "no fix applied" not in outcome["why"] else "")
    outcome["flags"] = flags
    return outcome


def _same_tree(a: str, b: str) -> bool:
    import ast

    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except (SyntaxError, ValueError):
        return False


def key(record: dict) -> str:
    return f"{record['project']}/{record['file']}:{record['line']} {record['operator']}: {record['mutation']}"


def _record(mutant: Mutant, **fields) -> dict:
    out = {
        "project": getattr(mutant, "project", ""),
        "operator": mutant.operator,
        "file": mutant.file,
        "line": mutant.line,
        "function": mutant.function,
        "mutation": mutant.description,
        "expected": list(mutant.expected),
        "one_answer": mutant.one_answer,
    }
    out.update(fields)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--amp-lint-python", default=sys.executable, help="python whose `-m amp_lint` is measured")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="at most this many mutants (a seeded sample)")
    parser.add_argument("--per-operator", type=int, default=12, help="at most this many sites per project and operator (0: all)")
    parser.add_argument("--operators", default="", help="comma-separated operator names (default: all)")
    parser.add_argument("--projects", default="", help="comma-separated project folder names (default: all)")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--fix-back", action="store_true", help="fix every caught mutant and compare with the original")
    parser.add_argument("--no-download", action="store_true", help="do not download missing corpus packages")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--resume", action="store_true", help="keep the verdicts already in OUT.partial.jsonl (an interrupted run)")
    parser.add_argument("--fix-back-from", default="", help="keep an earlier run's verdicts (its JSON); run the fix-back of its caught mutants")
    parser.add_argument("--from-json", default="", help="render the report of an earlier run's JSON (causes re-read)")
    parser.add_argument("--fix-back-json", default="", help="with --from-json: take the fix-back classes from this run's JSON")
    parser.add_argument("--out", default="", help="markdown report (the JSON details go beside it, .json)")
    args = parser.parse_args(argv)

    operators = [o for o in args.operators.split(",") if o] or list(OPERATORS)
    unknown = [o for o in operators if o not in OPERATORS]
    if unknown:
        parser.error(f"unknown operator(s): {', '.join(unknown)}; known: {', '.join(OPERATORS)}")
    if args.from_json:
        raw = Path(args.from_json).read_text(encoding="utf-8")
        results = [json.loads(l) for l in raw.splitlines() if l.strip()] if args.from_json.endswith(".jsonl") else json.loads(raw)
        if args.fix_back_json:  # the fix-back classes of another run (--fix-back-from), by mutant
            extra = Path(args.fix_back_json).read_text(encoding="utf-8")
            fixes = {key(r): r["fix_back"] for r in map(json.loads, extra.splitlines()) if r.get("fix_back")} if args.fix_back_json.endswith(".jsonl") else {key(r): r["fix_back"] for r in json.loads(extra) if r.get("fix_back")}
            for r in results:
                if r.get("caught") and key(r) in fixes:
                    r["fix_back"] = fixes[key(r)]
        results = refresh(results, inject_corpus.projects())
        attach_causes(results, HERE / "inject-causes.json")
        summary = inject_report.render(results, operators, 0.0, args)
        if args.out:
            Path(args.out).write_text(summary, encoding="utf-8")
            if Path(args.out).with_suffix(".json") != Path(args.from_json):
                Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(summary)
        return 0
    if not args.no_download:
        inject_corpus.ensure()
    projects = inject_corpus.projects()
    if args.projects:
        wanted = [p for p in args.projects.split(",") if p]
        missing = [p for p in wanted if p not in projects]
        if missing:
            parser.error(f"no such project(s) in the corpus: {', '.join(missing)}")
        projects = {p: projects[p] for p in wanted}
    todo = find_mutants(projects, operators, args.per_operator, args.seed)
    if args.limit and len(todo) > args.limit:
        todo = random.Random(args.seed).sample(todo, args.limit)
    if args.list:
        for m in sorted(todo, key=lambda m: (m.project, m.file, m.line)):
            print(f"{m.project}/{m.file}:{m.line} {m.operator}: {m.description}")
        print(f"{len(todo)} mutants in {len({m.project for m in todo})} projects")
        return 0
    wanted = {key(_record(m, project=m.project)) for m in todo}
    earlier = None
    partial = Path(args.out).with_suffix(".partial.jsonl") if args.out else None
    if args.resume and partial is not None and partial.exists():
        earlier = {key(r): r for r in map(json.loads, partial.read_text(encoding="utf-8").splitlines()) if not r.get("error")}
        if not args.fix_back:  # nothing left to do for these
            done_keys = set(earlier)
            todo = [m for m in todo if key(_record(m, project=m.project)) not in done_keys]
    elif partial is not None and partial.exists():
        partial.unlink()
    if args.fix_back_from:
        raw = Path(args.fix_back_from).read_text(encoding="utf-8")
        loaded = [json.loads(l) for l in raw.splitlines() if l.strip()] if args.fix_back_from.endswith(".jsonl") else json.loads(raw)
        earlier = {key(r): r for r in loaded if not r.get("error")}
        todo = [m for m in todo if earlier.get(key(_record(m, project=m.project)), {}).get("caught")]
        args.fix_back = True
    started = time.time()
    results = run_all(todo, projects, args, earlier)
    if earlier is not None:  # the earlier run's other verdicts, unchanged
        done = {key(r) for r in results}
        results += [r for k, r in earlier.items() if k not in done]
        if args.resume and not args.fix_back_from:
            results = [r for r in results if key(r) in wanted]
    elapsed = time.time() - started
    attach_causes(results, HERE / "inject-causes.json")
    summary = inject_report.render(results, operators, elapsed, args)
    print(summary)
    if args.out:
        Path(args.out).write_text(summary, encoding="utf-8")
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


def refresh(results: List[dict], projects: Dict[str, Path]) -> List[dict]:
    """An earlier run's records under the current operators: records of mutants they no longer produce
    are dropped (a fixed site finder), and a miss whose new default finding (`other_changes`) in the site's
    function is of a rule now expected for its operator counts as caught."""
    from inject_ops import EXPECTED, function_span

    produced: Dict[tuple, set] = {}
    kept = []
    for r in results:
        place = (r["project"], r["file"])
        if place not in produced:
            try:
                text = (projects[r["project"]] / r["file"]).read_text(encoding="utf-8")
            except (KeyError, OSError, UnicodeDecodeError):
                text = ""
            produced[place] = {(m.operator, m.line, m.description): m.one_answer for m in mutants(text, r["file"])} if text else {}
            produced[place][("text", 0, text)] = True
        if (r["operator"], r["line"], r["mutation"]) not in produced[place]:
            print(f"dropped (no longer a site): {key(r)}", file=sys.stderr)
            continue
        r["one_answer"] = produced[place][(r["operator"], r["line"], r["mutation"])]
        if not r.get("caught") and not r.get("error"):
            text = next(d for o, _, d in produced[place] if o == "text")
            span = function_span(text, r["function"]) or (r["line"] - 6, r["line"] + 6)
            hits = [c for c in r["other_changes"] if c[0] == "+" and c[1:].split("@")[0] in EXPECTED[r["operator"]]
                    and span[0] <= int(c.split("@")[1]) <= span[1]]
            if hits:
                r.update(caught=True, assumed_only=False, elsewhere=False, caught_by=hits[0][1:].split("@")[0])
                r["other_changes"] = [c for c in r["other_changes"] if c != hits[0]]
        kept.append(r)
    return kept


def attach_causes(results: List[dict], path: Path) -> None:
    """The causes of misses, read by hand (bench/inject-causes.json: {"project/file:line operator":
    {"principle": N, "cause": "..."}}), attached to the misses they name; `{"equivalent": true, "cause":
    "..."}` marks a mutant that is no bug at its site."""
    if not path.exists():
        return
    causes = json.loads(path.read_text(encoding="utf-8"))
    for record in results:
        note = causes.get(f"{record['project']}/{record['file']}:{record['line']} {record['operator']}")
        if note and note.get("equivalent"):
            # An equivalent mutant: the mutation is not a bug at that site (judged by hand; the cause says
            # why). Left out of caught/total; a finding on it is a false positive, and the report says so.
            record["equivalent"] = True
            record["cause"] = note.get("cause", "")
        elif note and not record.get("caught"):
            record["principle"] = note.get("principle")
            record["cause"] = note.get("cause", "")


def run_all(todo: List[Mutant], projects: Dict[str, Path], args, earlier=None) -> List[dict]:
    by_project: Dict[str, List[Mutant]] = defaultdict(list)
    for mutant in todo:
        by_project[mutant.project].append(mutant)
    queue = sorted(by_project, key=lambda p: -len(by_project[p]))  # the biggest first
    lock = threading.Lock()
    results: List[dict] = []
    done = [0]

    partial = Path(args.out).with_suffix(".partial.jsonl") if args.out else None

    def log(record: dict) -> None:
        with lock:
            if partial is not None:
                with partial.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(record, sort_keys=True) + "\n")
            done[0] += 1
            mark = "caught" if record.get("caught") else "ERROR" if record.get("error") else "MISSED"
            fix = record.get("fix_back", {}).get("class", "")
            print(f"[{done[0]}/{len(todo)}] {mark:6} {record['operator']:20} {record['project']}/{record['file']}:{record['line']} {fix}", file=sys.stderr, flush=True)

    def serve() -> None:
        worker = Worker(args.amp_lint_python)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    name = queue.pop(0)
                found = run_project(worker, name, projects[name], by_project[name], args.fix_back, log, earlier)
                with lock:
                    results.extend(found)
        finally:
            worker.close()

    threads = [threading.Thread(target=serve) for _ in range(max(1, args.jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results, key=lambda r: (r["operator"], r["project"], r["file"], r["line"]))


if __name__ == "__main__":
    sys.exit(main())
