#!/usr/bin/env python3
"""PreToolUse hook that rewrites Bash commands (hookSpecificOutput.updatedInput).

`echo unsafe...` runs as `echo safe` (allowed); a command mentioning `ask-me` is replaced and
sent to a person for confirmation (permissionDecision: ask).
"""

import json
import sys

data = json.load(sys.stdin)
command = data.get("tool_input", {}).get("command", "")
if command.startswith("echo unsafe"):
    decision = "allow"
    updated = {"command": "echo safe"}
elif "ask-me" in command:
    decision = "ask"
    updated = {"command": "echo confirmed > confirmed.txt; echo confirmed"}
else:
    sys.exit(0)
print(json.dumps({
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": decision,
        "permissionDecisionReason": "rewritten by rewrite.py",
        "updatedInput": updated,
    }
}))
