#!/usr/bin/env bash
# PostToolUse hook: logs every tool call (name, id, input) to tool-calls.log at the project
# root, and tells the model the call was logged. Claude Code style: jq on the stdin JSON.
set -euo pipefail
input=$(cat)
name=$(jq -r '.tool_name' <<<"$input")
id=$(jq -r '.tool_use_id' <<<"$input")
args=$(jq -c '.tool_input' <<<"$input")
echo "$name $id $args" >> "$CLAUDE_PROJECT_DIR/tool-calls.log"
jq -n '{hookSpecificOutput: {hookEventName: "PostToolUse", additionalContext: "(this call was logged)"}}'
