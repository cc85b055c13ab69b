#!/usr/bin/env bash
# Any event: appends "<event> <tool_use_id>" to counts.log at the project root, so a test can
# count how often each hook ran.
set -euo pipefail
input=$(cat)
event=$(jq -r '.hook_event_name' <<<"$input")
id=$(jq -r '.tool_use_id // ""' <<<"$input")
echo "$event $id" >> "$CLAUDE_PROJECT_DIR/counts.log"
