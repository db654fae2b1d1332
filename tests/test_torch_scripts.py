"""The tests' script runner (tests/torch_scripts.py) runs a script as `python SCRIPT` would: in its folder, as
`__main__`, with its arguments and its folder first on `sys.path`; a failure is a non-zero exit with the traceback."""

from __future__ import annotations

import importlib.util

import pytest
from torch_scripts import run_module, run_script

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the server imports torch")


def test_a_script_runs_as_main_in_its_folder_with_its_arguments(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys\nfrom helper import VALUE\n"
        "if __name__ == '__main__':\n    print(VALUE + 1, sys.argv[1:], os.getcwd())\n    print('warned', file=sys.stderr)\n"
    )
    done = run_script(script, args=["--lr", "1"])
    assert (done.returncode, done.stdout, done.stderr) == (0, f"42 ['--lr', '1'] {tmp_path}\n", "warned\n")


def test_failures_are_exit_codes_with_their_traceback(tmp_path):
    (tmp_path / "boom.py").write_text("raise ValueError('no good')\n")
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "says.py").write_text("import sys\nsys.exit('bad input')\n")
    boom = run_script(tmp_path / "boom.py")
    assert boom.returncode == 1 and "ValueError: no good" in boom.stderr and "Traceback" in boom.stderr
    assert run_script(tmp_path / "quits.py").returncode == 3
    says = run_script(tmp_path / "says.py")
    assert (says.returncode, says.stderr) == (1, "bad input\n")


def test_each_script_starts_from_the_same_clean_process(tmp_path):
    (tmp_path / "first.py").write_text("import torch\ntorch.manual_seed(0)\nimport json\njson.MARK = 1\nprint(torch.randn(1).item())\n")
    (tmp_path / "second.py").write_text("import json\nprint(hasattr(json, 'MARK'))\n")
    assert run_script(tmp_path / "first.py").stdout == run_script(tmp_path / "first.py").stdout
    assert run_script(tmp_path / "second.py").stdout == "False\n"


def test_a_module_runs_as_python_dash_m(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "main.py").write_text("from pkg import __name__ as package\nprint(package, __name__)\n")
    done = run_module("pkg.main", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "pkg __main__\n")
