"""Every default finding of amp-lint on the unmutated injection corpus, against the judged list.

bench/realworld-judged.tsv holds one judged finding a line: project, file, line, rule, verdict (TP / FP /
judgement), and one line why. A deprecation (AMP07x) may be judged for a whole file with line `*`. This script
runs amp-lint with its default settings on each project of the corpus (bench/inject_corpus.py) and prints the
findings that the list does not judge as "unjudged", and judged findings that are no longer reported as "gone".

    python bench/judge_check.py [--amp-lint-python PY] [--projects a,b] [--write-unjudged]

Exit status 1 when a finding is unjudged. `--write-unjudged` appends them to the list with verdict `?`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import inject_corpus  # noqa: E402

JUDGED = HERE / "realworld-judged.tsv"
VERDICTS = ("TP", "FP", "judgement", "?")


def load(path: Path = JUDGED) -> List[dict]:
    entries = []
    if not path.exists():
        return entries
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 6 or fields[4] not in VERDICTS:
            raise SystemExit(f"{path}:{number}: expected 6 tab-separated fields with a verdict in {VERDICTS}: {line!r}")
        project, file, row, rule, verdict, why = fields
        entries.append({"project": project, "file": file, "line": row, "rule": rule, "verdict": verdict, "why": why})
    return entries


def findings(python: str, project: str, root: Path, jobs: int) -> List[dict]:
    run = subprocess.run(
        [python, "-m", "amp_lint", "--no-cache", "--isolated", "--output-format", "json", "--exit-zero", "-j", str(jobs), "."],
        cwd=root, capture_output=True, text=True,
    )
    try:
        records = json.loads(run.stdout)
    except ValueError:
        raise SystemExit(f"{project}: amp-lint exited {run.returncode}: {run.stderr[-500:]}")
    out = []
    for r in records:
        name = r["filename"][2:] if r["filename"].startswith("./") else r["filename"]
        out.append({"project": project, "file": name, "line": str(r["location"]["row"]), "rule": r["code"], "message": r["message"]})
    return out


def compare(found: List[dict], judged: List[dict]) -> Tuple[List[dict], List[dict], Counter]:
    """(unjudged findings, judged entries no longer found, verdict counts of the findings)."""
    exact: Dict[Tuple[str, str, str, str], dict] = {(e["project"], e["file"], e["line"], e["rule"]): e for e in judged}
    wholefile = {(e["project"], e["file"], e["rule"]): e for e in judged if e["line"] == "*"}
    unjudged, used, counts = [], set(), Counter()
    for f in found:
        entry = exact.get((f["project"], f["file"], f["line"], f["rule"])) or wholefile.get((f["project"], f["file"], f["rule"]))
        if entry is None:
            unjudged.append(f)
            continue
        used.add(id(entry))
        counts[entry["verdict"]] += 1
    gone = [e for e in judged if id(e) not in used]
    return unjudged, gone, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--amp-lint-python", default=sys.executable)
    parser.add_argument("--projects", default="")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--write-unjudged", action="store_true")
    parser.add_argument("--save", default="", help="write the findings as JSON here")
    args = parser.parse_args()
    projects = inject_corpus.projects()
    if args.projects:
        projects = {p: projects[p] for p in args.projects.split(",") if p in projects}
    found = []
    for name, root in projects.items():
        found += findings(args.amp_lint_python, name, root, args.jobs)
    if args.save:
        Path(args.save).write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    judged = [e for e in load() if e["project"] in projects]
    unjudged, gone, counts = compare(found, judged)
    for f in unjudged:
        print(f"unjudged: {f['project']}/{f['file']}:{f['line']} {f['rule']} {f['message'][:160]}")
    for e in gone:
        print(f"gone: {e['project']}/{e['file']}:{e['line']} {e['rule']} ({e['verdict']}: {e['why'][:100]})")
    deprecations = sum(1 for f in found if f["rule"].startswith("AMP07"))
    print(
        f"{len(found)} default findings in {len(projects)} projects ({deprecations} AMP07x); judged: "
        + ", ".join(f"{v} {counts.get(v, 0)}" for v in VERDICTS) + f"; unjudged {len(unjudged)}; gone {len(gone)}"
    )
    if args.write_unjudged and unjudged:
        with JUDGED.open("a", encoding="utf-8") as out:
            for f in unjudged:
                out.write("\t".join([f["project"], f["file"], f["line"], f["rule"], "?", f["message"][:200].replace("\t", " ")]) + "\n")
    return 1 if unjudged else 0


if __name__ == "__main__":
    sys.exit(main())
