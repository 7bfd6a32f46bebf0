"""The deployment agent's public parameters name what they accept.

A user's editor and type checker can only help when ``session``, ``interaction_handler``
and ``policy`` say what they take (a :class:`~tether.tools.base.Session`, a
:class:`~tether.agent.interaction.UserInteractionHandler`, a
:class:`~tether.tools.CommandPolicy`) instead of ``Any``.
"""

from __future__ import annotations

import inspect

import pytest

from tether.agent.deploy import AsyncDeploymentAgent, DeploymentAgent, model_info

TYPED = {
    "session": "Session",
    "ssh_session": "Session",
    "local_session": "Session",
    "interaction_handler": "UserInteractionHandler | None",
    "policy": "CommandPolicy | None",
    "host_facts": "HostFacts | None",
    "llm_config": "LLMConfig | None",
    "config": "LLMConfig",
}

METHODS = [
    AsyncDeploymentAgent.__init__,
    AsyncDeploymentAgent.deploy,
    AsyncDeploymentAgent.deploy_local,
    AsyncDeploymentAgent.resume,
    DeploymentAgent.__init__,
    DeploymentAgent.deploy,
    DeploymentAgent.deploy_local,
    DeploymentAgent.resume,
]


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.__qualname__)
def test_public_parameters_are_not_any(method: object) -> None:
    params = inspect.signature(method).parameters  # type: ignore[arg-type]
    checked = {name: str(p.annotation) for name, p in params.items() if name in TYPED}
    assert checked, "the method takes none of the parameters this test checks"
    assert checked == {name: TYPED[name] for name in checked}


def test_model_info_takes_the_llm_config() -> None:
    assert str(inspect.signature(model_info).parameters["config"].annotation) == "LLMConfig | None"
