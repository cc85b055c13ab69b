"""An MCP server whose tool list changes while it runs, built with the official Python SDK.

Usage: changing_server.py (stdio)

It starts with one tool, `grow`. Each call of `grow`, `reshape`, `shrink` or `clash` changes the
tool list and sends `notifications/tools/list_changed` before answering:

- `grow` adds `echo` (a string `text` in, `echo: <text>` out);
- `reshape` replaces `echo` with one that takes `text` and `times` and has a new description;
- `shrink` removes `echo`;
- `clash` adds `echo.v2` and `echo_v2`, two names a client adapts to the same one.
"""

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("changing")


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


if __name__ == "__main__":
    server.run("stdio")
