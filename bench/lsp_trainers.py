"""The editor where users type: edits of the training step of real trainers and of dense training code.

    python bench/lsp_latency.py --trainers          # five real trainers and the dense 3,000-line file
    python bench/lsp_trainers.py --edits 3           # the same, run alone

Five real trainers of 1,000-2,000 lines that hold a GradScaler step (`TRAINERS`, from the injection corpus:
`bench/inject_corpus.py`, whose `ensure()` downloads them), and the dense 3,000-line file of `bench/dense_gen.py`.
In each, the line of `scaler.step(...)` and the line of the scaled backward are edited, each in two ways (a
comment appended; the first argument of the call renamed), each with an incremental `didChange` (the line's
range) and a full one (the whole text): `--edits` edits of each kind. Measured: `didOpen` to the first
`publishDiagnostics` (a fresh server per file), every edit's `didChange` to the `publishDiagnostics` of its
version (median and 90th percentile per file, and per kind), the server's CPU per edit, and its RSS after the
edits. The server is the checkout's (`python -m amp_lint server`), driven by pygls's client (`lsp_latency.Session`).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from dense_gen import dense_training_file  # noqa: E402
from inject_corpus import EXTRA_DIR  # noqa: E402

# (corpus folder, path): class-based trainers with a GradScaler step, 1,000-2,000 lines, five kinds of model.
TRAINERS = (
    (EXTRA_DIR, "nnunetv2/nnunetv2/training/nnUNetTrainer/nnUNetTrainer.py"),  # segmentation
    (EXTRA_DIR, "ultralytics/ultralytics/engine/trainer.py"),  # detection
    (EXTRA_DIR, "simpletransformers/simpletransformers/seq2seq/seq2seq_model.py"),  # sequence to sequence
    (EXTRA_DIR, "simpletransformers/simpletransformers/question_answering/question_answering_model.py"),  # QA
    (EXTRA_DIR, "simpletransformers/simpletransformers/conv_ai/conv_ai_model.py"),  # dialogue
)

_STEP = re.compile(r"\b\w*scaler\w*\.step\((?P<arg>[^,()]+)")
_SCALED_BACKWARD = re.compile(r"\.scale\((?P<arg>[^,()]+)\)\.backward\(")


def trainer_paths() -> List[Path]:
    return [root / "src" / relative for root, relative in TRAINERS]


def target_lines(text: str) -> Dict[str, Tuple[int, str]]:
    """{"step": (0-based line, the call's first argument), "backward": ...}: the first `scaler.step(` of the
    file, and the scaled backward (`scaler.scale(loss).backward(`) nearest before it (else the first)."""
    rows = text.split("\n")
    step = next(i for i, row in enumerate(rows) if _STEP.search(row) and not row.lstrip().startswith("#"))
    backward = [i for i, row in enumerate(rows) if _SCALED_BACKWARD.search(row) and not row.lstrip().startswith("#")]
    before = [i for i in backward if i < step]
    chosen = before[-1] if before else backward[0]
    return {
        "step": (step, _STEP.search(rows[step]).group("arg")),
        "backward": (chosen, _SCALED_BACKWARD.search(rows[chosen]).group("arg")),
    }


def edited_line(original: str, target: str, argument: str, how: str, version: int) -> str:
    if how == "comment":
        return f"{original}  # edit {version}"
    pattern = _STEP if target == "step" else _SCALED_BACKWARD
    match = pattern.search(original)
    start, end = match.span("arg")
    return original[:start] + f"{argument.strip()}_{version}" + original[end:]


async def _change(session, uri: str, version: int, rows: List[str], line: int, new_line: str, full: bool) -> float:
    types = session.types
    done = session.expect(uri, version)
    old = rows[line]
    rows[line] = new_line
    if full:
        change = types.TextDocumentContentChangeWholeDocument(text="\n".join(rows))
    else:
        change = types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, 0), types.Position(line, len(old))), text=new_line
        )
    sent = time.perf_counter()
    session.client.text_document_did_change(
        types.DidChangeTextDocumentParams(types.VersionedTextDocumentIdentifier(uri=uri, version=version), [change])
    )
    return await asyncio.wait_for(done, 600) - sent


def server_command(code: Optional[Path]) -> Optional[List[str]]:
    """The server of another checkout (or an export of one: `--code`), else None (this checkout's)."""
    if code is None:
        return None
    # (`-m` would put the working folder first on sys.path, and with it this checkout's amp_lint)
    start = f"import sys, runpy; sys.path.insert(0, {str(code.resolve())!r}); sys.argv = ['amp-lint', 'server']; runpy.run_module('amp_lint', run_name='__main__')"
    return [sys.executable, "-c", start]


async def edit_file(folder: Path, text: str, name: str, edits: int, pause: float, command=None) -> dict:
    """Open `text` in a fresh server, then the edits: {open, times per kind, cpu per edit, rss}."""
    from lsp_latency import Session

    targets = target_lines(text)
    session = Session(folder, None, command)
    await session.start()
    try:
        path = folder / name
        opened = await session.open(path, text)
        settled = await session.idle()
        rows = text.split("\n")
        originals = {target: rows[line] for target, (line, _) in targets.items()}
        uri = path.as_uri()
        version = 1
        times: Dict[Tuple[str, str, str], List[float]] = {}
        cpu_before = session.cpu_seconds()
        for target, (line, argument) in targets.items():
            for how in ("comment", "argument"):
                for sync in ("incremental", "full"):
                    for _ in range(edits):
                        version += 1
                        new_line = edited_line(originals[target], target, argument, how, version)
                        seconds = await _change(session, uri, version, rows, line, new_line, sync == "full")
                        times.setdefault((target, how, sync), []).append(seconds)
                        await asyncio.sleep(pause)
        count = sum(len(v) for v in times.values())
        return {
            "open": opened,
            "settled": settled,
            "times": times,
            "cpu_per_edit": (session.cpu_seconds() - cpu_before) / max(count, 1),
            "rss": session.rss_mib(),
        }
    finally:
        await session.stop()


def percentiles(values: List[float]) -> Tuple[float, float]:
    ms = sorted(v * 1000 for v in values)
    return statistics.median(ms), ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]


def run(edits: int = 3, pause: float = 0.1, paths: Optional[List[Path]] = None, dense_lines: int = 3000, code: Optional[Path] = None) -> List[dict]:
    """Every trainer that is there, then the dense file; prints as it goes and returns the rows."""
    cases = []
    for path in paths if paths is not None else trainer_paths():
        if not path.is_file():
            print(f"{path}: not found (python -c 'import inject_corpus; inject_corpus.ensure()' in bench/), skipped")
            continue
        cases.append(("/".join(path.parts[-2:]), path.read_text(encoding="utf-8")))
    if dense_lines:
        cases.append((f"dense_gen {dense_lines:,} lines", dense_training_file(dense_lines)))
    rows = []
    with tempfile.TemporaryDirectory(prefix="amp-lint-lsp-trainers-") as name:
        for index, (label, text) in enumerate(cases):
            result = asyncio.run(edit_file(Path(name), text, f"trainer_{index}.py", edits, pause, server_command(code)))
            every = [t for values in result["times"].values() for t in values]
            median, p90 = percentiles(every)
            row = dict(result, label=label, lines=text.count("\n"), median_ms=median, p90_ms=p90)
            rows.append(row)
            print(
                f"{label} ({row['lines']:,} lines): open -> first diagnostics {result['open'] * 1000:7.0f} ms, "
                f"edit -> diagnostics median {median:6.1f} ms  p90 {p90:6.1f} ms  (server CPU per edit "
                f"{result['cpu_per_edit'] * 1000:6.1f} ms), RSS {result['rss']:5.1f} MiB",
                flush=True,
            )
            for (target, how, sync), values in result["times"].items():
                kind_median, kind_p90 = percentiles(values)
                print(f"    {target:8s} {how:8s} {sync:11s} median {kind_median:7.1f} ms  p90 {kind_p90:7.1f} ms")
    return rows


def table(rows: List[dict]) -> str:
    out = [
        "| file | lines | didOpen -> first diagnostics | edit median | edit p90 | server CPU per edit | RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        out.append(
            f"| {row['label']} | {row['lines']:,} | {row['open'] * 1000:.0f} ms | {row['median_ms']:.0f} ms | "
            f"{row['p90_ms']:.0f} ms | {row['cpu_per_edit'] * 1000:.0f} ms | {row['rss']:.0f} MiB |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edits", type=int, default=3, help="edits of each kind (2 lines x 2 ways x 2 syncs)")
    parser.add_argument("--pause", type=float, default=0.1)
    parser.add_argument("--dense-lines", type=int, default=3000, help="0: no dense file")
    parser.add_argument("--code", type=Path, help="run the server of this checkout (or export of one), not this one")
    parser.add_argument("files", nargs="*", type=Path, help="trainers to edit (default: TRAINERS)")
    args = parser.parse_args(argv)
    rows = run(args.edits, args.pause, args.files or None, args.dense_lines, args.code)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
