#!/usr/bin/env python3
"""Stop hook (an output guardrail): a reply that holds a US social security number ends the
operation (`continue: false` with a `stopReason`) instead of reaching the user."""

import json
import re
import sys

SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")

data = json.load(sys.stdin)
if SSN.search(data.get("last_assistant_message", "")):
    print(json.dumps({"continue": False, "stopReason": "The reply holds a social security number."}))
