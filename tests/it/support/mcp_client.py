"""The official MCP Python SDK's client, driven by tests/it/bridge_mcp.rs.

Usage: python3 mcp_client.py URL TOKEN MODE   (MODE: auto or legacy)
       python3 mcp_client.py stdio CWD MODE -- COMMAND ARGS...
                                (the client starts the server on stdio)

Reads one JSON command per line on stdin and answers each with one JSON
line on stdout, so the test can act on the log between steps:

  {"op": "list"}                       -> {"tools": [{name, description, inputSchema}]}
  {"op": "watch"}                      -> {"watching": true}  (tools/list_changed from now on)
  {"op": "changed", "timeout": S}      -> {"changed": bool}   (one change seen since the last)
  {"op": "call", "name", "args", "meta"}
                                       -> {"isError", "content", "structuredContent", "progress"}
                                          or {"mcpError": {code, message}} (a protocol error)
  {"op": "cancel", "name", "args"}     -> {"cancelled": true, "progress": [...]}
                                          (cancelled at its first progress notification)

Startup prints {"connected": PROTOCOL_VERSION}; an error anywhere prints
{"error": TEXT} and exits 1.
"""

import json
import sys

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
import mcp_types as types


def say(value):
    print(json.dumps(value), flush=True)


async def main(url, token, mode, command):
    changed = anyio.Event()

    async def on_message(message):
        nonlocal changed
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    if url == "stdio":
        server = StdioServerParameters(command=command[0], args=command[1:], cwd=token)
    else:
        server = streamable_http_client(url, http_client=http)
    async with http, Client(
        server,
        mode=mode,
        message_handler=on_message,
        cache=None,
    ) as client, anyio.create_task_group() as group:
        say({"connected": client.protocol_version})
        stdin = anyio.wrap_file(sys.stdin)
        async for line in stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "list":
                listed = await client.list_tools()
                say({"tools": [tool.model_dump(by_alias=True, exclude_none=True) for tool in listed.tools]})
            elif op == "watch":
                if client.protocol_version >= "2026-07-28":
                    ready = anyio.Event()

                    async def listen():
                        async with client.listen(tools_list_changed=True) as subscription:
                            ready.set()
                            async for _event in subscription:
                                changed.set()

                    group.start_soon(listen)
                    await ready.wait()
                say({"watching": True})
            elif op == "changed":
                with anyio.move_on_after(command.get("timeout", 20)):
                    await changed.wait()
                seen = changed.is_set()
                changed = anyio.Event()
                say({"changed": seen})
            elif op == "call":
                progress = []

                async def on_progress(value, total, message):
                    progress.append({"progress": value, "message": message})

                try:
                    result = await client.call_tool(
                        command["name"],
                        command.get("args", {}),
                        progress_callback=on_progress,
                        meta=command.get("meta"),
                    )
                except MCPError as error:
                    say({"mcpError": {"code": error.code, "message": str(error)}})
                    continue
                answer = result.model_dump(by_alias=True, exclude_none=True)
                answer["progress"] = progress
                say(answer)
            elif op == "cancel":
                progress = []
                first = anyio.Event()

                async def on_first(value, total, message):
                    progress.append({"progress": value, "message": message})
                    first.set()

                async with anyio.create_task_group() as call:

                    async def run():
                        await client.call_tool(
                            command["name"], command.get("args", {}), progress_callback=on_first
                        )

                    call.start_soon(run)
                    with anyio.fail_after(command.get("timeout", 20)):
                        await first.wait()
                    # Abandoning the call is how the SDK cancels it: it
                    # sends notifications/cancelled (or, at 2026-07-28,
                    # closes the request's stream).
                    call.cancel_scope.cancel()
                say({"cancelled": True, "progress": progress})
            else:
                raise ValueError(f"unknown op {op!r}")
        group.cancel_scope.cancel()


if __name__ == "__main__":
    try:
        anyio.run(main, *sys.argv[1:4], sys.argv[5:])
    except BaseException as error:  # the test reads the reason
        if isinstance(error, KeyboardInterrupt):
            raise
        say({"error": f"{type(error).__name__}: {error}"})
        sys.exit(1)
