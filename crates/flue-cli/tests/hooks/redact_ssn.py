#!/usr/bin/env python3
"""PostToolUse hook: social security numbers in a tool's result are replaced with [SSN] before
the model sees it (flue's `updatedToolOutput`)."""

import json
import re
import sys

SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")

data = json.load(sys.stdin)
content = data.get("tool_response", {}).get("content", "")
redacted = SSN.sub("[SSN]", content)
if redacted != content:
    print(json.dumps({
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": redacted}
    }))
