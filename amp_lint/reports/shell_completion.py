"""`amp-lint generate-shell-completion powershell`: the completion script click does not ship (bash, zsh and fish
are click's own). Registered by the command line (`amp_lint.cli`)."""

from __future__ import annotations

import os

from click.shell_completion import ShellComplete


class PowerShellComplete(ShellComplete):
    """PowerShell, which click does not ship: `amp-lint generate-shell-completion powershell | Out-String |
    Invoke-Expression` in $PROFILE. Paths are left to PowerShell's own completion."""

    name = "powershell"
    source_template = """Register-ArgumentCompleter -Native -CommandName %(prog_name)s -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)
    $env:COMP_WORDS = $commandAst.ToString().Substring(0, [Math]::Min($cursorPosition - $commandAst.Extent.StartOffset, $commandAst.ToString().Length))
    $env:COMP_CWORD = $wordToComplete
    $env:%(complete_var)s = "powershell_complete"
    (& %(prog_name)s) | ForEach-Object {
        $value, $help = $_ -split "`t", 2
        [System.Management.Automation.CompletionResult]::new($value, $value, 'ParameterValue', $(if ($help) { $help } else { $value }))
    }
    Remove-Item Env:%(complete_var)s, Env:COMP_WORDS, Env:COMP_CWORD
}
"""

    def get_completion_args(self):
        from click.parser import split_arg_string

        words, incomplete = split_arg_string(os.environ.get("COMP_WORDS", "")), os.environ.get("COMP_CWORD", "")
        args = words[1:]
        if incomplete and args and args[-1] == incomplete:
            args.pop()
        return args, incomplete

    def complete(self) -> str:
        args, incomplete = self.get_completion_args()
        items = [item for item in self.get_completions(args, incomplete) if item.type == "plain"]
        return "\n".join(f"{item.value}\t{item.help or ''}" for item in items)

