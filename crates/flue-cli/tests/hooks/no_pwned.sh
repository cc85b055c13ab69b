#!/usr/bin/env bash
# PreToolUse hook (Bash): refuses a command that mentions the PWNED marker, with the reason on
# standard error and exit 2. Claude Code style: jq reads the command from the stdin JSON.
set -euo pipefail
command=$(jq -r '.tool_input.command // ""')
if grep -q 'PWNED' <<<"$command"; then
  echo "Refusing: this command writes the PWNED marker." >&2
  exit 2
fi
