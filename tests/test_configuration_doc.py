"""docs/configuration.md and nats-server.conf keep up with the code.

* every ``ASTRABOX_NATS_*`` setting is documented with its default;
* every connection flag of the command line is documented with its variable;
* every admin endpoint is classified for the auditor in nats-server.conf: reads allowed,
  actions denied (a new endpoint must be decided on, never left to chance);
* the docs index links every page, and the README links the index.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from nats_scheduler.admin.reader import REPLICA_STATUS_ENDPOINT
from nats_scheduler.admin.service import AdminService
from nats_scheduler.command_line import FLAG_VARIABLES
from nats_scheduler.natsserver.config import REPO_CONFIG
from nats_scheduler.settings import NatsSettings

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "configuration.md").read_text("utf-8")
ACTIONS = {"schedules.hold", "schedules.release", "schedules.hold_bulk",
           "schedules.release_bulk", "runs.run_now", "runs.replay"}


def table_rows(text: str) -> dict[str, list[str]]:
    """First cell (without backticks) -> all cells, for every markdown table row."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    return rows


def shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "off" if not value else "on"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_every_setting_is_documented_with_its_default() -> None:
    rows = table_rows(DOC)
    defaults = {f.name: f.default for f in fields(NatsSettings)}
    for name, variable in NatsSettings.ENV.items():
        assert variable in rows, f"{variable} is not documented"
        default_cell = rows[variable][1]
        if name in ("url", "identity"):
            continue  # "required unless embedded" / generated per process
        assert default_cell.split(" ")[0].strip("`") == shown(defaults[name]), (variable,
                                                                                 default_cell)


def test_every_connection_flag_is_documented() -> None:
    rows = table_rows(DOC)
    for flag, variable in FLAG_VARIABLES.items():
        option = "--" + flag.replace("_", "-")
        assert option in rows and rows[option][1] == f"`{variable}`", option


def test_every_admin_endpoint_is_decided_for_the_auditor() -> None:
    config = REPO_CONFIG.read_text("utf-8")
    auditor = config[config.index("AUDITOR_PERMISSIONS"):config.index("accounts {")]
    allow = auditor[auditor.index("allow:"):auditor.index("deny:")]
    deny = auditor[auditor.index("deny:"):]
    # endpoints() only names bound methods: an instance without a provider is enough
    service = AdminService.__new__(AdminService)
    endpoints = {*AdminService.endpoints(service), REPLICA_STATUS_ENDPOINT}
    assert endpoints >= ACTIONS
    for endpoint in endpoints:
        subject = f'"SCHED.admin.{endpoint}"'
        if endpoint in ACTIONS:
            assert subject in deny and subject not in allow, endpoint
        else:
            assert subject in allow and subject not in deny, endpoint


def test_the_docs_index_links_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text("utf-8")
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")
    assert {"contract.md", "design.md", "architecture.md", "calendar.md"} <= set(pages)
    for page in pages:
        assert f"]({page})" in index, page
    assert "](docs/README.md)" in (ROOT / "README.md").read_text("utf-8")


def test_every_test_the_permission_rules_cite_exists() -> None:
    cited = set(re.findall(r"`(?:tests/[\w.]+::)?(test_\w+)`", DOC))
    files = set(re.findall(r"`(tests/test_\w+\.py)", DOC))
    source = "".join((ROOT / f).read_text("utf-8") for f in files)
    defined = set(re.findall(r"def (test_\w+)", "".join(
        p.read_text("utf-8") for p in (ROOT / "tests").glob("test_*.py"))))
    assert len(cited) >= 9 and cited <= defined, cited - defined
    assert all((ROOT / f).is_file() for f in files) and source
