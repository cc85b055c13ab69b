"""A hand-written MCP stdio server (standard library only) that misbehaves on purpose.

Usage: raw_server.py <scenario>

Scenarios that break the tool listing: `duplicate` (two tools that adapt to the same name),
`cursor-loop` (pagination repeats a cursor), `die` (prints FIXTURE_SECRET to stderr and exits
before the handshake), `bad-init` (answers `initialize` with nonsense), `bad-list` (answers
`tools/list` with nonsense). `pages` lists three pages of tools correctly. `calls` (the default)
lists tools that misbehave when called:

- ok: answers "fine"
- crash: writes to stderr and exits without answering
- hang: never answers (first writing a file at FIXTURE_HANG_MARK, when set: the call arrived)
- garbled: answers with a result that is not a tool result
- bad_output / missing_output / good_output: declare an output schema and break it or not
- fail: answers with isError
"""

import json
import sys

SCENARIO = sys.argv[1] if len(sys.argv) > 1 else "calls"

OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer"}},
    "required": ["count"],
}


def tool(name, output_schema=None):
    entry = {"name": name, "inputSchema": {"type": "object"}}
    if output_schema:
        entry["outputSchema"] = output_schema
    return entry


CALL_TOOLS = [
    tool("ok"),
    tool("crash"),
    tool("hang"),
    tool("garbled"),
    tool("fail"),
    tool("bad_output", OUTPUT_SCHEMA),
    tool("missing_output", OUTPUT_SCHEMA),
    tool("good_output", OUTPUT_SCHEMA),
]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request_id, result):
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def list_tools(request_id, params):
    cursor = (params or {}).get("cursor")
    if SCENARIO == "bad-list":
        return answer(request_id, {"tools": "none"})
    if SCENARIO == "duplicate":
        return answer(request_id, {"tools": [tool("a.b"), tool("a_b")]})
    if SCENARIO == "cursor-loop":
        return answer(request_id, {"tools": [tool(f"t{cursor or 0}")], "nextCursor": "again"})
    if SCENARIO == "pages":
        pages = {None: ("p2", ["one"]), "p2": ("p3", ["two"]), "p3": (None, ["three"])}
        next_cursor, names = pages[cursor]
        result = {"tools": [tool(name) for name in names]}
        if next_cursor:
            result["nextCursor"] = next_cursor
        return answer(request_id, result)
    return answer(request_id, {"tools": CALL_TOOLS})


def call_tool(request_id, params):
    name = params["name"]
    text = lambda t: {"content": [{"type": "text", "text": t}]}
    if name == "ok":
        return answer(request_id, text("fine"))
    if name == "crash":
        sys.stderr.write("fixture: crashing on purpose\n")
        sys.stderr.flush()
        sys.exit(3)
    if name == "hang":
        mark = __import__("os").environ.get("FIXTURE_HANG_MARK")
        if mark:
            open(mark, "w").close()
        return None
    if name == "garbled":
        return answer(request_id, {"content": "not a list of blocks"})
    if name == "fail":
        return answer(request_id, {"content": [{"type": "text", "text": "it broke"}], "isError": True})
    if name == "bad_output":
        return answer(request_id, {**text("{}"), "structuredContent": {"count": "many"}})
    if name == "missing_output":
        return answer(request_id, text("no structure"))
    if name == "good_output":
        return answer(request_id, {**text("{\"count\": 3}"), "structuredContent": {"count": 3}})
    return send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"unknown tool {name}"}})


def main():
    if SCENARIO == "die":
        secret = __import__("os").environ.get("FIXTURE_SECRET", "")
        sys.stderr.write(f"fixture: cannot start, token {secret} rejected\n")
        sys.exit(1)
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        request_id = message.get("id")
        if method == "initialize" and SCENARIO == "bad-init":
            answer(request_id, {"hello": "world"})
        elif method == "initialize":
            answer(request_id, {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw-fixture", "version": "1"},
            })
        elif method == "tools/list":
            list_tools(request_id, message.get("params"))
        elif method == "tools/call":
            call_tool(request_id, message["params"])
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main()
