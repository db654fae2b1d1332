#!/usr/bin/env bash
# Run `amp-lint verify` on CUDA at GPU sizes and print the verdict tables, one pass per AMP dtype.
#
#   bench/verify_gpu.sh                                   # the bundled scripts; float16, then bfloat16
#   DTYPES=float16 VERIFY_SCALE=16 STEPS=500 bench/verify_gpu.sh path/to/train.py other/dir
#
# Arguments: scripts or folders to verify (default: the scripts bundled with amp-lint), relative to the folder you
# call this from. Environment: PYTHON (default .venv/bin/python of the repository when present, else python3),
# VERIFY_SCALE (8: the bundled scripts widen their models and batches by this factor), STEPS (300), WARMUP (20),
# SEEDS (3), DTYPES ("float16 bfloat16"), and OUT (a folder, relative to where you call from): when set, each
# pass's table (verify-<dtype>.txt), JSON report (verify-<dtype>.json), loss CSVs and plots (files-<dtype>/) and
# converted scripts (converted-<dtype>/) are written there. bfloat16 is skipped, with a note, on a GPU without it.
#
# QUICK=1: the short check (under 5 minutes on one GPU): verify's CUDA path on two bundled scripts (mlp_regression,
# conditional_gan; float16, 60 steps x 2 seeds, VERIFY_SCALE 4), then the runtime guard on CUDA: a right and a
# broken (clip before unscale_) GradScaler("cuda") loop under `python -m amp_lint.guard` (exit 0 and 1, AMP030
# named), and the guard's overhead on a CUDA training step (bench/guard_overhead.py --device cuda).
#
# Exit status: the worst pass's verdict code (0 equivalent, 1 not equivalent, 3 inconclusive, 4 not run); 2 when
# the script cannot run (no CUDA, no torch, a bad path or option); with QUICK=1, 5 when a guard check fails.
set -uo pipefail

caller=$(pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || { echo "verify_gpu.sh: cannot find the repository" >&2; exit 2; }

PYTHON=${PYTHON:-$([ -x "$repo/.venv/bin/python" ] && echo "$repo/.venv/bin/python" || echo python3)}
case "$PYTHON" in
  */*) [[ "$PYTHON" = /* ]] || PYTHON="$caller/$PYTHON" ;;
esac
command -v "$PYTHON" >/dev/null 2>&1 || { echo "verify_gpu.sh: no Python at $PYTHON" >&2; exit 2; }
export VERIFY_SCALE=${VERIFY_SCALE:-8}
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"

if [[ "${QUICK:-0}" == 1 ]]; then
  export VERIFY_SCALE=${VERIFY_SCALE_QUICK:-4} STEPS=${STEPS:-60} SEEDS=${SEEDS:-2} DTYPES=${DTYPES:-float16} WARMUP=${WARMUP:-10}
  if [[ $# -eq 0 ]]; then
    set -- "$repo/amp_lint/verify/scripts/mlp_regression.py" "$repo/amp_lint/verify/scripts/conditional_gan.py"
  fi
fi
out=${OUT:-}
if [[ -n "$out" && "$out" != /* ]]; then out="$caller/$out"; fi
paths=()
for path in "$@"; do
  [[ "$path" = /* ]] || path="$caller/$path"
  [[ -e "$path" ]] || { echo "verify_gpu.sh: no such file or folder: $path" >&2; exit 2; }
  paths+=("$path")
done
for number in "${STEPS:-300}" "${WARMUP:-20}" "${SEEDS:-3}"; do
  [[ "$number" =~ ^[0-9]+$ ]] || { echo "verify_gpu.sh: STEPS, WARMUP and SEEDS must be whole numbers, got '$number'" >&2; exit 2; }
done

verdicts=0
"$PYTHON" - "${STEPS:-300}" "${WARMUP:-20}" "${SEEDS:-3}" "${DTYPES:-float16 bfloat16}" "$out" "${paths[@]}" <<'PY'
import json
import os
import sys
from pathlib import Path

try:
    from amp_lint.verify.runner import VerifyError, format_text, verify_scripts
except ImportError as exc:
    print(f"verify_gpu.sh: cannot import amp_lint: {exc}", file=sys.stderr)
    sys.exit(2)

steps, warmup, seeds, dtypes, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5]
paths = sys.argv[6:]
unknown = [dtype for dtype in dtypes if dtype not in ("float16", "bfloat16")]
if unknown:
    print(f"verify_gpu.sh: DTYPES may hold float16 and bfloat16, not {' '.join(unknown)}", file=sys.stderr)
    sys.exit(2)
epochs = steps // 32 + 2  # the bundled scripts make at least 32 steps per epoch: enough epochs for `steps`

try:
    import torch  # only to describe the machine; the runs themselves happen in child processes
except ImportError:
    print("verify_gpu.sh: torch is not installed in this Python", file=sys.stderr)
    sys.exit(2)
if not torch.cuda.is_available():
    print("verify_gpu.sh: CUDA is not available to this Python", file=sys.stderr)
    sys.exit(2)
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, VERIFY_SCALE={os.environ['VERIFY_SCALE']}, "
      f"{steps} steps x {seeds} seeds, {warmup} warm-up", flush=True)

if out:
    Path(out).mkdir(parents=True, exist_ok=True)
worst = None
severity = [1, 4, 3, 0]
for dtype in dtypes:
    print(f"\n== {dtype} ==", flush=True)
    if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
        print(f"Note: skipped: {torch.cuda.get_device_name()} does not support bfloat16.", flush=True)
        continue
    keep = Path(out, f"converted-{dtype}") if out else None
    try:
        report = verify_scripts(
            paths, device="cuda", dtype=dtype, steps=steps, warmup=warmup, seeds=seeds,
            script_args=["--epochs", str(epochs)] if not paths else [],
            progress=lambda message: print(message, file=sys.stderr, flush=True), keep_converted=keep,
            output_dir=Path(out, f"files-{dtype}") if out else None,
        )
    except VerifyError as exc:
        print(f"verify_gpu.sh: {exc}", file=sys.stderr)
        sys.exit(2)
    table = format_text(report)
    print(table, flush=True)
    if out:
        Path(out, f"verify-{dtype}.txt").write_text(table + "\n")
        Path(out, f"verify-{dtype}.json").write_text(json.dumps(report.to_dict(), indent=1))
    code = report.exit_code
    worst = code if worst is None else min(worst, code, key=severity.index)
sys.exit(worst or 0)
PY
verdicts=$?
[[ "${QUICK:-0}" == 1 && $verdicts -ne 2 ]] || exit $verdicts

echo
echo "== the runtime guard on CUDA =="
work=$(mktemp -d) || exit 2
trap 'rm -rf "$work"' EXIT
cat > "$work/train.py" <<'TRAIN'
import torch

model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
x, y = torch.randn(256, 512, device="cuda"), torch.randint(0, 10, (256,), device="cuda")
for _ in range(50):
    opt.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)  # UNSCALE
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
TRAIN
grep -v "# UNSCALE" "$work/train.py" > "$work/broken.py"
guard_failed=0
(cd "$work" && "$PYTHON" -m amp_lint.guard --mode record --report right.json train.py) || { echo "guard: the right loop was flagged"; guard_failed=1; }
(cd "$work" && "$PYTHON" -m amp_lint.guard --mode record --report broken.json broken.py)
[[ $? -eq 1 ]] && grep -q AMP030 "$work/broken.json" || { echo "guard: the broken loop was not flagged AMP030"; guard_failed=1; }
"$PYTHON" "$repo/bench/guard_overhead.py" --device cuda --rounds 10 --steps 20 || guard_failed=1
[[ $guard_failed -eq 0 ]] || exit 5
exit $verdicts