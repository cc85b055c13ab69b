#!/usr/bin/env python3
"""PreToolUse hook for the Bash tool: checks the command against rules and blocks it.

Written for flue's tests in the style of Claude Code's example hook
`bash_command_validator_example.py` (see PROVENANCE.md): it reads the hook input (JSON) on
standard input, ignores other tools, and when a rule matches prints the reasons on standard
error and exits 2, which blocks the call and shows the reasons to the model. Invalid input is
a non-blocking error (exit 1).
"""

import json
import re
import sys

RULES = [
    (r"\brm\s+-[a-zA-Z]*(rf|fr)\b", "Refusing `rm -rf`: remove files one at a time instead"),
    (r"^grep\b(?!.*\|)", "Use 'rg' (ripgrep) instead of 'grep'"),
]


def main() -> None:
    try:
        data = json.load(sys.stdin)
    except json.JSONDecodeError as err:
        print(f"invalid hook input: {err}", file=sys.stderr)
        sys.exit(1)
    if data.get("tool_name") != "Bash":
        sys.exit(0)
    command = data.get("tool_input", {}).get("command", "")
    problems = [message for pattern, message in RULES if re.search(pattern, command)]
    if problems:
        for message in problems:
            print(f"- {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
