"""Drives the live service with a client generated from openapi.yaml by openapi-python-client.

usage: generated_client.py PACKAGE_PARENT_DIR BASE_URL AGENT_TOKEN
The generated package `scriptgate_client` must be importable from PACKAGE_PARENT_DIR.
"""
import hashlib
import sys

sys.path.insert(0, sys.argv[1])
base_url, token = sys.argv[2], sys.argv[3]

from scriptgate_client import AuthenticatedClient, Client  # noqa: E402
from scriptgate_client.api.execute import execute_script, get_execution, validate_script  # noqa: E402
from scriptgate_client.api.jobs import get_job, get_job_artifact, run_job  # noqa: E402
from scriptgate_client.api.tools import list_tools  # noqa: E402
from scriptgate_client.models import (  # noqa: E402
    ErrorBody,
    ErrorKind,
    ExecuteIn,
    ExecuteOut,
    JobIn,
    JobOut,
    JobStatus,
    Language,
    Layer,
    Status,
    ToolFormat,
    ToolsOut,
    ValidateIn,
    Verdict,
)

client = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True, timeout=60)

# Hello world: 200 with a typed result.
r = execute_script.sync_detailed(
    client=client,
    body=ExecuteIn(script_content="print('hello from the generated client')", script_type=Language.PYTHON, timeout=20),
)
assert r.status_code == 200, (r.status_code, r.content)
out = r.parsed
assert isinstance(out, ExecuteOut), type(out)
assert out.status == Status.COMPLETED and out.success and out.exit_code == 0, out
assert out.stdout == "hello from the generated client\n", out.stdout
print("hello world:", out.status, out.exit_code, repr(out.stdout))

# The same execution, read back by id.
again = get_execution.sync(client=client, id=out.execution_id)
assert isinstance(again, ExecuteOut) and again.stdout == out.stdout, again

# Bash too.
r = execute_script.sync(client=client, body=ExecuteIn(script_content="echo \"$((6*7))\"", script_type=Language.BASH))
assert isinstance(r, ExecuteOut) and r.stdout == "42\n", r

# A validation failure: 200, validation_failed, typed error and verdict; nothing ran.
r = execute_script.sync(
    client=client,
    body=ExecuteIn(script_content="import os\nos.system(input())\n", script_type=Language.PYTHON),
)
assert isinstance(r, ExecuteOut), r
assert r.validation_failed and not r.success, r
assert r.error.type_ == ErrorKind.VALIDATION_FAILED, r.error
assert r.validation.layer == Layer.DANGEROUS, r.validation
assert r.exit_code is None, r.exit_code
print("validation failure:", r.error.type_, r.validation.findings[0].rule)

v = validate_script.sync(client=client, body=ValidateIn(script_content="def f(:\n", script_type=Language.PYTHON))
assert isinstance(v, Verdict) and not v.valid and v.layer == Layer.SYNTAX, v

# A schema error: the client sends what its types allow (timeout 0), the server answers a typed 400.
r = execute_script.sync_detailed(
    client=client, body=ExecuteIn(script_content="print(1)", script_type=Language.PYTHON, timeout=0)
)
assert r.status_code == 400 and isinstance(r.parsed, ErrorBody), (r.status_code, r.content)
assert r.parsed.error.type_ == "schema_error" and "timeout" in r.parsed.error.message, r.parsed
print("schema error:", r.parsed.error.message)

# No token: a typed 401.
anonymous = Client(base_url=base_url, raise_on_unexpected_status=True)
r = execute_script.sync_detailed(client=anonymous, body=ExecuteIn(script_content="print(1)", script_type=Language.PYTHON))
assert r.status_code == 401 and isinstance(r.parsed, ErrorBody) and r.parsed.error.type_ == "unauthorized", r

# Tool definitions in one format.
tools = list_tools.sync(client=client, format_=ToolFormat.OPENAI)
assert isinstance(tools, ToolsOut), tools
names = [t["function"]["name"] for t in tools.openai]
assert names == [
    "execute_script", "validate_script", "run_job", "session_create", "session_exec",
    "session_destroy", "session_upload_file", "session_download_file",
], names
# A job: its typed result, the same by job id, and its artifact checked against its sha256.
report = '{"passed": 3}\n'
job = JobIn.from_dict({
    "protocol_version": "1.0",
    "steps": [
        {"id": "write", "type": "write_file", "arguments": {"path": "report.json", "content": report}},
        {"id": "read", "type": "read_file", "arguments": {"path": "report.json"}},
    ],
    "artifacts": ["/workspace/report.json"],
})
r = run_job.sync_detailed(client=client, body=job)
assert r.status_code == 200, (r.status_code, r.content)
result = r.parsed
assert isinstance(result, JobOut), type(result)
assert result.status == JobStatus.SUCCESS, result
digest = hashlib.sha256(report.encode()).hexdigest()
assert result.artifacts[0].sha256 == digest, result.artifacts
again = get_job.sync(client=client, job_id=result.job_id)
assert isinstance(again, JobOut) and again.execution_id == result.execution_id, again
r = get_job_artifact.sync_detailed(client=client, job_id=result.job_id, path="workspace/report.json")
assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == digest, (r.status_code, r.content)
print("job:", result.status, result.artifacts[0].path)
print("OK")
