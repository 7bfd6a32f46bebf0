"""The deployment agent tells the model about an action's optional probe, and a probe the
model sends is kept with the command that changes the host."""

from __future__ import annotations

from tether.agent import AsyncDeploymentAgent
from tether.agent.deploy import DEPLOY_SYSTEM_PROMPT
from tether.models import ScriptedModel
from tether.stores import open_store
from tether.tools import LocalSession


async def test_the_deploy_prompt_explains_the_probe_and_a_probed_command_runs(tmp_path):
    """The first system message names the probe field; a probed host change completes."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "index.html").write_text("<h1>hi</h1>")
    model = ScriptedModel(
        [
            {
                "action": "execute",
                "command": "mkdir -p site && cp index.html site/",
                "reasoning": "publish the page",
                "probe": "test -f site/index.html",
            },
            {"action": "done", "message": "published in site/"},
        ]
    )
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as store:
        agent = AsyncDeploymentAgent(model, store, log_dir=tmp_path / "logs", max_iterations=5)
        async with LocalSession(cwd=app) as session:
            result = await agent.deploy_local(str(app), session=session, deploy_dir=str(app))
    assert result.success, result.message
    assert (app / "site" / "index.html").is_file()
    system = model.calls[0][0]["content"]
    assert '"probe"' in system and "exiting 0 when the effect is in place" in system
    assert DEPLOY_SYSTEM_PROMPT.splitlines()[0] in system
