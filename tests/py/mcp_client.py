"""Drives scriptgate's MCP server with the official MCP Python SDK.

usage: mcp_client.py http URL TOKEN MODE    (streamable HTTP, bearer token)
       mcp_client.py stdio BINARY MODE      (spawns `BINARY mcp`, inheriting the environment)
MODE is `legacy` (initialize handshake and a session) or `auto` (the SDK's default negotiation).
"""
import hashlib
import json
import os
import sys

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


async def exercise(client: Client) -> None:
    assert client.server_info.name == "scriptgate", client.server_info
    assert client.server_capabilities.tools is not None
    print("protocol:", client.protocol_version)

    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == [
        "execute_script", "run_job", "session_create", "session_destroy",
        "session_download_file", "session_exec", "session_upload_file", "validate_script",
    ], sorted(tools)
    execute = tools["execute_script"]
    props = execute.input_schema["properties"]
    assert props["script_type"]["enum"] == ["python", "bash"], props
    assert props["script_content"]["maxLength"] == 10000, props
    assert props["timeout"]["maximum"] == 300, props
    assert set(execute.input_schema["required"]) == {"script_content", "script_type"}
    assert execute.output_schema["properties"]["stdout"]["type"] == "string", execute.output_schema
    assert tools["validate_script"].annotations.read_only_hint is True

    # Hello world: a structured result (the client checks it against the output schema).
    r = await client.call_tool(
        "execute_script", {"script_content": "print('hello from mcp')", "script_type": "python", "timeout": 20}
    )
    assert not r.is_error, r
    out = r.structured_content
    assert out["status"] == "completed" and out["success"] and out["exit_code"] == 0, out
    assert out["stdout"] == "hello from mcp\n", out
    assert out["agent"] in ("mcp-agent", "mcp-stdio"), out  # recorded as the token's agent
    assert json.loads(r.content[0].text) == out
    print("execute:", repr(out["stdout"]), "warm" if out["warm"] else "cold")

    # A script that ran and failed: a tool error that still carries the whole result.
    r = await client.call_tool("execute_script", {"script_content": "echo $((2+3)) >&2; exit 3", "script_type": "bash"})
    assert r.is_error and r.structured_content["exit_code"] == 3 and r.structured_content["stderr"] == "5\n", r
    assert r.structured_content["error"]["type"] == "execution_failure", r

    # A script that fails validation: a structured tool error with the verdict; nothing ran.
    r = await client.call_tool(
        "execute_script",
        {"script_content": "import subprocess, sys\nsubprocess.run(sys.argv[1], shell=True)\n", "script_type": "python"},
    )
    assert r.is_error, r
    err = r.structured_content
    assert err["validation_failed"] and err["error"]["type"] == "validation_failed", err
    assert err["validation"]["layer"] == "dangerous", err
    assert err["exit_code"] is None, err
    print("validation failure:", err["validation"]["findings"][0]["rule"])

    # A bad argument: a tool error the model can read, not a protocol error.
    r = await client.call_tool("execute_script", {"script_content": "print(1)", "script_type": "ruby"})
    assert r.is_error and "schema_error" in r.content[0].text and "ruby" in r.content[0].text, r
    r = await client.call_tool("execute_script", {"script_content": "print(1)", "script_type": "python", "timeout": 0})
    assert r.is_error and "timeout" in r.content[0].text, r

    # validate_script: the verdict, without running anything.
    r = await client.call_tool("validate_script", {"script_content": "for i in range(3)\n    print(i)\n", "script_type": "python"})
    assert not r.is_error and r.structured_content["valid"] is False and r.structured_content["layer"] == "syntax", r

    # run_job: a structured job; its artifact comes back embedded, checked against its sha256.
    assert "steps" in tools["run_job"].input_schema["properties"], tools["run_job"].input_schema
    report = '{"passed": 3}\n'
    job = {
        "protocol_version": "1.0",
        "steps": [
            {"id": "write", "type": "write_file", "arguments": {"path": "report.json", "content": report}},
            {"id": "read", "type": "read_file", "arguments": {"path": "report.json"}},
        ],
        "artifacts": ["/workspace/report.json"],
    }
    r = await client.call_tool("run_job", job)
    assert not r.is_error, r
    out = r.structured_content
    assert out["status"] == "success" and [s["status"] for s in out["steps"]] == ["success", "success"], out
    assert out["steps"][1]["result"]["content"] == report, out
    digest = hashlib.sha256(report.encode()).hexdigest()
    assert out["artifacts"][0]["sha256"] == digest, out
    embedded = [c for c in r.content if c.type == "resource"]
    assert embedded and embedded[0].resource.text == report, r.content
    print("run_job:", out["status"], out["artifacts"][0]["path"])

    # A job that breaks its constraints: a tool error with the complete result; nothing ran.
    bad = {"protocol_version": "1.0", "steps": [{"id": "w", "type": "write_file", "arguments": {"path": "/etc/passwd", "content": "x"}}]}
    r = await client.call_tool("run_job", bad)
    assert r.is_error and r.structured_content["steps"][0]["error"]["type"] == "policy_violation", r
    r = await client.call_tool("run_job", {"protocol_version": "2.0", "steps": []})
    assert r.is_error and "schema_error" in r.content[0].text, r

    # An unknown tool is a protocol error.
    try:
        await client.call_tool("rm_rf", {})
        raise AssertionError("expected MCPError")
    except MCPError as e:
        print("unknown tool:", e.code)
    print("OK")


async def main() -> None:
    kind, target, *rest = sys.argv[1:]
    if kind == "http":
        token, mode = rest
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        async with Client(streamable_http_client(target, http_client=http), mode=mode) as client:
            await exercise(client)
    else:
        (mode,) = rest
        params = StdioServerParameters(command=target, args=["mcp"], env=dict(os.environ))
        async with Client(params, mode=mode) as client:
            await exercise(client)


anyio.run(main)
