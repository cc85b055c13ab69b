"""An MCP server whose tool list changes while it runs, built with the official Python SDK.

Usage: changing_server.py stdio | sse | streamable-http

Over HTTP it binds 127.0.0.1 on a free port and prints `listening on <port>` to stderr.

It declares `tools.listChanged` and starts with the tools `grow`, `reshape`, `shrink` and
`clash`. Each of them changes the tool list and sends `notifications/tools/list_changed` before
it answers, outside the request as the TypeScript SDK does (over streamable HTTP: on the
standalone stream, not ordered with the answer):

- `grow` adds `echo` (a string `text` in, `echo: <text>` out);
- `reshape` replaces `echo` with one that takes `text` and `times` and has a new description;
- `shrink` removes `echo`;
- `clash` adds `echo.v2` and `echo_v2`, two names a client adapts to the same one.
"""

import socket
import sys

import anyio
import uvicorn
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("changing")

# MCPServer declares no `listChanged`; announce it, as servers that send the notification must.
_capabilities = server._lowlevel_server.get_capabilities


def _announcing(notification_options=None, *args, **kwargs):
    return _capabilities(NotificationOptions(tools_changed=True), *args, **kwargs)


server._lowlevel_server.get_capabilities = _announcing


def echo(text: str) -> str:
    return f"echo: {text}"


def echo_repeated(text: str, times: int) -> str:
    return " ".join([f"echo: {text}"] * times)


def first_clash() -> str:
    return "first"


def second_clash() -> str:
    return "second"


def drop(name: str) -> None:
    try:
        server.remove_tool(name)
    except ToolError:
        pass


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `echo`."""
    drop("echo")
    server.add_tool(echo, name="echo", description="Echoes the text back.")
    await ctx.session.send_tool_list_changed()
    return "added echo"


@server.tool()
async def reshape(ctx: Context) -> str:
    """Replaces `echo` with a version that repeats the text."""
    drop("echo")
    server.add_tool(echo_repeated, name="echo", description="Echoes the text back `times` times.")
    await ctx.session.send_tool_list_changed()
    return "reshaped echo"


@server.tool()
async def shrink(ctx: Context) -> str:
    """Removes the tool `echo`."""
    drop("echo")
    await ctx.session.send_tool_list_changed()
    return "removed echo"


@server.tool()
async def clash(ctx: Context) -> str:
    """Adds two tools whose names differ only in a character a client must replace."""
    server.add_tool(first_clash, name="echo.v2", description="The first of two clashing tools.")
    server.add_tool(second_clash, name="echo_v2", description="The second of two clashing tools.")
    await ctx.session.send_tool_list_changed()
    return "added echo.v2 and echo_v2"


async def serve_http(app):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"listening on {sock.getsockname()[1]}", file=sys.stderr, flush=True)
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
