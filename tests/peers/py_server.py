"""An MCP server built with the official Python SDK (`mcp` on PyPI), for flue's tests.

Usage: py_server.py stdio | sse | streamable-http

Over HTTP it binds 127.0.0.1 on a free port and prints `listening on <port>` to stderr. When
the environment sets FIXTURE_TOKEN, every HTTP request must carry
`Authorization: Bearer <FIXTURE_TOKEN>` or is refused with 401.
"""

import os
import socket
import sys

from typing import Literal

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

server = MCPServer("py-fixture")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def wipe() -> str:
    """Pretends to delete everything."""
    return "wiped"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def append_note(note: str) -> str:
    """Pretends to append a note."""
    return f"appended {note}"


@server.tool(name="weird name.v2")
def weird() -> str:
    """A tool whose name needs sanitising."""
    return "weird"


@server.tool(name="???")
def nameless() -> str:
    """A tool whose name sanitises to nothing."""
    return "nameless"


@server.tool()
def env_value(name: str) -> str:
    """Returns an environment variable of the server process."""
    return os.environ.get(name, "<unset>")


class Release(BaseModel):
    version: str = Field(description="The version to release")
    channel: Literal["stable", "beta"] = "stable"
    notify: bool = True


@server.tool()
async def release(ctx: Context) -> str:
    """Asks which version to release (an elicitation), then pretends to release it."""
    result = await ctx.elicit("Which version should be released?", Release)
    if result.action == "accept":
        data = result.data
        notify = "yes" if data.notify else "no"
        return f"released {data.version} on {data.channel} (notify: {notify})"
    return f"not released: {result.action}"


def require_token(app, token):
    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != expected:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return guarded


async def serve_http(app):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"listening on {sock.getsockname()[1]}", file=sys.stderr, flush=True)
    token = os.environ.get("FIXTURE_TOKEN")
    if token:
        app = require_token(app, token)
    config = uvicorn.Config(app, log_level="warning")
    await uvicorn.Server(config).serve(sockets=[sock])


def main():
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "stdio":
        server.run("stdio")
    elif transport == "sse":
        anyio.run(serve_http, server.sse_app())
    elif transport == "streamable-http":
        anyio.run(serve_http, server.streamable_http_app())
    else:
        sys.exit(f"unknown transport {transport}")


if __name__ == "__main__":
    main()
