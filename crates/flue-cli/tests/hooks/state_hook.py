#!/usr/bin/env python3
"""Any event: reads the conversation's state (`flue_state`) and answers a new one
(`hookSpecificOutput.updatedState`, flue's own field), counting the event under its name.

A prompt `state: <json>` makes a UserPromptSubmit hook answer that JSON as the state instead
(to test refusals); a prompt `state: huge` answers a document over the size limit. Every state
the hook saw is appended to seen.log at the project root, one JSON line per run."""
import json
import os
import sys

hook_input = json.load(sys.stdin)
event = hook_input["hook_event_name"]
state = hook_input.get("flue_state")
with open(os.path.join(os.environ["CLAUDE_PROJECT_DIR"], "seen.log"), "a") as log:
    log.write(json.dumps({"event": event, "state": state}) + "\n")
if state is None:
    # A task session has no state: say nothing.
    sys.exit(0)
prompt = hook_input.get("prompt", "")
if event == "UserPromptSubmit" and prompt.startswith("state: "):
    raw = prompt[len("state: "):]
    new = {"big": "x" * (70 * 1024)} if raw == "huge" else json.loads(raw)
else:
    new = dict(state)
    new[event] = new.get(event, 0) + 1
    if event == "PostToolUse":
        new["last_tool"] = hook_input["tool_name"]
print(json.dumps({"hookSpecificOutput": {"hookEventName": event, "updatedState": new}}))
