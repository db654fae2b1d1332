"""amp-lint's CLI with the test-only rule AMP999 registered, whose fix scales a loss twice (see
tests/test_fix_check.py): for tests that run a command, such as bench/fix_roundtrip.py, and need a fix
that the check before writing drops."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amp_lint import rules  # noqa: E402
from amp_lint.cli import main  # noqa: E402
from amp_lint.rules._table import RuleEntry  # noqa: E402
from test_fix_check import _BrokenFix  # noqa: E402

rules.ALL_RULES = list(rules.ALL_RULES) + [_BrokenFix]
rules.RULES = rules.RULES + (RuleEntry(_BrokenFix.code, "", "_BrokenFix", False, (), ()),)  # the registry's table
main()
