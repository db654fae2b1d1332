#!/usr/bin/env bash
# Run `amp-lint verify` over the bundled training scripts on CUDA at GPU sizes and print the verdict tables.
#
#   bench/verify_gpu.sh                                   # float16, then bfloat16; VERIFY_SCALE=8, 300 steps
#   DTYPES=float16 VERIFY_SCALE=16 STEPS=500 bench/verify_gpu.sh
#
# Environment: PYTHON (default .venv/bin/python when present, else python3), VERIFY_SCALE (8: the scripts widen
# their models and batches by this factor), STEPS (300), WARMUP (20), DTYPES ("float16 bfloat16"), and OUT: when
# set, each pass's table (verify-<dtype>.txt), JSON report (verify-<dtype>.json) and converted scripts
# (converted-<dtype>/) are written there. Exit status: the worst pass's (0 equivalent, 1 not, 2 crash or error).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
export VERIFY_SCALE=${VERIFY_SCALE:-8}

exec "$PYTHON" - "${STEPS:-300}" "${WARMUP:-20}" "${DTYPES:-float16 bfloat16}" "${OUT:-}" <<'PY'
import json
import os
import sys
from pathlib import Path

from amp_lint.verify.runner import VerifyError, format_text, verify_scripts

steps, warmup, dtypes, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
epochs = steps // 32 + 2  # the bundled scripts make at least 32 steps per epoch: enough epochs for `steps`

import torch  # only to describe the machine; the runs themselves happen in child processes

if not torch.cuda.is_available():
    sys.exit("verify_gpu.sh: CUDA is not available to this Python")
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, VERIFY_SCALE={os.environ['VERIFY_SCALE']}, "
      f"{steps} steps, {warmup} warm-up", flush=True)

worst = 0
for dtype in dtypes:
    print(f"\n== {dtype} ==", flush=True)
    keep = Path(out, f"converted-{dtype}") if out else None
    try:
        report = verify_scripts(
            [], device="cuda", dtype=dtype, steps=steps, warmup=warmup, script_args=["--epochs", str(epochs)],
            progress=lambda message: print(message, file=sys.stderr, flush=True), keep_converted=keep,
        )
    except VerifyError as exc:
        sys.exit(f"verify_gpu.sh: {exc}")
    table = format_text(report)
    print(table, flush=True)
    if out:
        Path(out, f"verify-{dtype}.txt").write_text(table + "\n")
        Path(out, f"verify-{dtype}.json").write_text(json.dumps(report.to_dict(), indent=1))
    worst = max(worst, report.exit_code)
sys.exit(worst)
PY
