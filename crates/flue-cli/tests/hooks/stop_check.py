#!/usr/bin/env python3
"""Stop hook: the reply must say the work was checked; e-mail addresses are redacted.

Blocks a reply without "checked" (unless a Stop hook already blocked: stop_hook_active),
which sends the reason to the model; replaces addresses in the reply (flue's updatedReply).
"""

import json
import re
import sys

data = json.load(sys.stdin)
reply = data.get("last_assistant_message", "")
if "checked" not in reply and not data.get("stop_hook_active"):
    print(json.dumps({"decision": "block", "reason": "Say that you checked your work."}))
    sys.exit(0)
redacted = re.sub(r"[\w.+-]+@[\w-]+\.[\w.]+", "[email]", reply)
if redacted != reply:
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "Stop", "updatedReply": redacted}}))
