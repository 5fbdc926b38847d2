"""Checks with the official MCP Python SDK that a plot comes back as an image content block.

usage: mcp_plot_client.py URL TOKEN
Prints the sha256 of each image block, then OK.
"""
import base64
import hashlib
import struct
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

SCRIPT = """
import matplotlib.pyplot as plt
plt.figure(figsize=(6.4, 4.8))
plt.plot([0, 1, 2, 3], [0, 1, 4, 9])
print("plotted")
"""


async def main(url: str, token: str) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            profile = tools["execute_script"].input_schema["properties"]["profile"]
            assert "data" in profile["enum"], profile
            assert "pandas" in tools["execute_script"].description, tools["execute_script"].description
            r = await client.call_tool(
                "execute_script",
                {"script_content": SCRIPT, "script_type": "python", "profile": "data", "timeout": 120},
            )
            assert not r.is_error, r
            out = r.structured_content
            assert out["stdout"] == "plotted\n", out
            images = [c for c in r.content if c.type == "image"]
            assert len(images) == 1 == len(out["artifacts"]), (r.content, out)
            data = base64.b64decode(images[0].data)
            assert images[0].mime_type == "image/png", images[0]
            assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
            width, height = struct.unpack(">II", data[16:24])
            assert (width, height) == (640, 480), (width, height)
            digest = hashlib.sha256(data).hexdigest()
            assert digest == out["artifacts"][0]["sha256"], (digest, out["artifacts"])
            print("image", digest)
    print("OK")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
