"""Scores a review of src/login.py: the share of its known findings the reply names.

flue eval runs this with the case's transcript as JSON on stdin; the first line printed is the
score (0 to 1), the lines after it the reasoning kept with the result.
"""

import json
import sys

FINDINGS = {
    "SQL injection": "SQL injection",
    "hard-coded secret": "SECRET_KEY",
    "missing test": "no test",
}

transcript = json.load(sys.stdin)
reply = transcript["reply"]
found = [name for name, marker in FINDINGS.items() if marker in reply]
missed = [name for name in FINDINGS if name not in found]
print(len(found) / len(FINDINGS))
print("found: " + (", ".join(found) or "none"))
if missed:
    print("missed: " + ", ".join(missed))
