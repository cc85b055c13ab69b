#!/usr/bin/env bash
# PermissionRequest: answers a Bash call's confirmation, allowing an `echo` and denying
# anything else with a message, in Claude Code's `decision.behavior` shape.
set -euo pipefail
command=$(jq -r '.tool_input.command // ""')
if [[ "$command" == echo* ]]; then
  echo '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}'
else
  echo '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "deny", "message": "only echo runs without a person"}}}'
fi
