"""MAIN, TEST, DEV, REVIEW and FINISH_REVIEW fix a real bug in a sample project, offline."""

import asyncio
import tempfile
from pathlib import Path

from tether.orchestrator import Orchestrator, ScriptedMain
from tether.orchestrator.demo import demo_runners, make_sample_repo, rule_main
from tether.stores import open_store


async def main() -> None:
    work = Path(tempfile.mkdtemp())
    project = make_sample_repo(work / "project")  # stats.py: median() is wrong for even counts
    async with open_store(f"sqlite:///{work}/tether.db") as store:
        orch = Orchestrator(project, store, main=ScriptedMain(rule_main), runners=demo_runners())
        result = await orch.start("fix-median", "Make the test suite pass.")
    print(result.status.value, result.state["subloop_result"])
    print((project / "reports" / "report_test.md").read_text().splitlines()[1])


asyncio.run(main())
