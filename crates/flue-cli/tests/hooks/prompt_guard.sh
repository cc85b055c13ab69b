#!/usr/bin/env bash
# UserPromptSubmit hook: blocks prompts that mention a password (JSON decision), otherwise
# adds context by printing plain text (which Claude Code adds to the prompt).
set -euo pipefail
input=$(cat)
prompt=$(jq -r '.prompt' <<<"$input")
if grep -qi 'password' <<<"$prompt"; then
  jq -n '{decision: "block", reason: "Prompts must not contain passwords."}'
  exit 0
fi
echo "Context from the prompt hook: today is release day."
