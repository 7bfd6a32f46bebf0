"""Rolling execution summary: structured step outputs folded into one summary.

Passing whole conversations between plan steps explodes the prompt and passing bare
key/values loses information; each step instead returns :class:`StepOutputs`, and
:func:`merge` folds them into an :class:`ExecutionSummary` with capped lists. ``merge`` is
a pure function of (summary, outputs), so it doubles as the state engine's reducer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_COMPLETED_ACTIONS",
    "MAX_CONFIGURATION_KEYS",
    "MAX_ENVIRONMENT_KEYS",
    "MAX_RESOLVED_ISSUES",
    "ExecutionSummary",
    "StepOutputs",
    "SummaryManager",
    "fold_phase",
    "merge",
    "parse_step_outputs",
]

MAX_COMPLETED_ACTIONS = 15
MAX_RESOLVED_ISSUES = 5
MAX_ENVIRONMENT_KEYS = 30
MAX_CONFIGURATION_KEYS = 20
FALLBACK_SUMMARY = "Step completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepOutputs:
    """What a finished step hands to the steps after it."""

    summary: str
    """Required: one sentence on what was accomplished."""
    environment_changes: Mapping[str, Any] = field(default_factory=dict)
    new_configurations: Mapping[str, str] = field(default_factory=dict)
    artifacts: tuple[str, ...] = ()
    services_started: tuple[Mapping[str, Any], ...] = ()
    custom_data: Mapping[str, Any] = field(default_factory=dict)
    issues_resolved: tuple[Mapping[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "environment_changes": dict(self.environment_changes),
            "new_configurations": dict(self.new_configurations),
            "artifacts": list(self.artifacts),
            "services_started": [dict(s) for s in self.services_started],
            "custom_data": dict(self.custom_data),
            "issues_resolved": [dict(i) for i in self.issues_resolved],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionSummary:
    """The global state every later step sees."""

    project_name: str = ""
    deploy_dir: str = ""
    strategy: str = ""
    environment: Mapping[str, Any] = field(default_factory=dict)
    completed_actions: tuple[str, ...] = ()
    """``[CATEGORY] step: summary``, newest last, at most 15."""
    configurations: Mapping[str, str] = field(default_factory=dict)
    resolved_issues: tuple[Mapping[str, str], ...] = ()
    """``{"issue", "resolution"}``, newest last, at most 5."""
    artifacts: tuple[str, ...] = ()
    services: tuple[Mapping[str, Any], ...] = ()
    last_updated: str = ""
    warnings: tuple[str, ...] = ()
    """Size warnings (too many environment or configuration keys), recorded once each."""

    def to_prompt_context(self) -> str:
        """The markdown block, for a step's system prompt."""
        lines = [
            "# Current Deployment State",
            f"- Project: {self.project_name or 'unknown'}",
            f"- Deploy Directory: {self.deploy_dir or 'unknown'}",
            f"- Strategy: {self.strategy or 'unknown'}",
        ]
        sections: list[tuple[str, list[str]]] = [
            ("Environment", [f"- {k}: {_show(v)}" for k, v in self.environment.items()]),
            ("Configurations", [f"- {k}: {v}" for k, v in self.configurations.items()]),
            ("Completed Actions", [f"- {a}" for a in self.completed_actions]),
            ("Services", [f"- {_service(s)}" for s in self.services]),
            ("Artifacts", [f"- {a}" for a in self.artifacts]),
            (
                "Resolved Issues",
                [f"- {i.get('issue', '?')} → {i.get('resolution', '?')}" for i in self.resolved_issues],
            ),
        ]
        for title, body in sections:
            if body:
                lines += ["", f"## {title}", *body]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "project_name": self.project_name,
            "deploy_dir": self.deploy_dir,
            "strategy": self.strategy,
            "environment": dict(self.environment),
            "completed_actions": list(self.completed_actions),
            "configurations": dict(self.configurations),
            "resolved_issues": [dict(i) for i in self.resolved_issues],
            "artifacts": list(self.artifacts),
            "services": [dict(s) for s in self.services],
            "last_updated": self.last_updated,
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutionSummary:
        return cls(
            project_name=str(data.get("project_name", "")),
            deploy_dir=str(data.get("deploy_dir", "")),
            strategy=str(data.get("strategy", "")),
            environment=dict(data.get("environment") or {}),
            completed_actions=tuple(str(a) for a in data.get("completed_actions") or ()),
            configurations={str(k): str(v) for k, v in (data.get("configurations") or {}).items()},
            resolved_issues=tuple(dict(i) for i in data.get("resolved_issues") or ()),
            artifacts=tuple(str(a) for a in data.get("artifacts") or ()),
            services=tuple(dict(s) for s in data.get("services") or ()),
            last_updated=str(data.get("last_updated", "")),
            warnings=tuple(str(w) for w in data.get("warnings") or ()),
        )


def _show(value: Any) -> str:
    return str(value)


def _service(service: Mapping[str, Any]) -> str:
    name = service.get("name", "service")
    rest = ", ".join(f"{k}={v}" for k, v in service.items() if k != "name")
    return f"{name} ({rest})" if rest else str(name)


def merge(
    summary: ExecutionSummary,
    outputs: StepOutputs,
    *,
    step_name: str = "",
    step_category: str = "",
    now: str | None = None,
    max_actions: int = MAX_COMPLETED_ACTIONS,
    max_issues: int = MAX_RESOLVED_ISSUES,
    max_environment_keys: int = MAX_ENVIRONMENT_KEYS,
    max_configuration_keys: int = MAX_CONFIGURATION_KEYS,
    phase_done: bool = False,
    warn: bool = True,
) -> ExecutionSummary:
    """Fold one step's outputs into the summary; pure, so usable as a state reducer.

    ``phase_done``: this step ends its phase (``step_category``), whose completed actions
    become one line, ``✅ phase deploy (4 items): artefacts …`` (phase compression).

    Later values win on the same key; lists keep the newest entries up to their caps.
    Growing past 30 environment / 20 configuration keys is allowed but warned about once
    (logged and recorded in ``warnings``). ``warn=False`` records it without logging: a fold
    of steps that were folded before (a summary rebuilt from the step log) said it already.
    """
    environment = {**summary.environment, **outputs.environment_changes}
    configurations = {**summary.configurations, **outputs.new_configurations}
    label = f"[{step_category.upper()}] " if step_category else ""
    name = f"{step_name}: " if step_name else ""
    actions = (*summary.completed_actions, f"{label}{name}{outputs.summary}")
    if phase_done and step_category:  # the finished phase's actions become one line
        actions = fold_phase(actions, step_category, (*summary.artifacts, *outputs.artifacts))
    actions = actions[-max_actions:]
    issues = (*summary.resolved_issues, *outputs.issues_resolved)[-max_issues:]
    artifacts = tuple(dict.fromkeys((*summary.artifacts, *outputs.artifacts)))[-20:]
    services = (*summary.services, *outputs.services_started)[-10:]
    warnings = list(summary.warnings)
    for what, size, cap in (
        ("environment", len(environment), max_environment_keys),
        ("configurations", len(configurations), max_configuration_keys),
    ):
        message = f"{what} has more than {cap} keys; the summary is growing"
        if size > cap and message not in warnings:
            if warn:
                logger.warning("execution summary: %s (%d)", message, size)
            warnings.append(message)
    return dataclasses.replace(
        summary,
        environment=environment,
        configurations=configurations,
        completed_actions=actions,
        resolved_issues=issues,
        artifacts=artifacts,
        services=services,
        last_updated=now or datetime.now(UTC).isoformat(timespec="seconds"),
        warnings=tuple(warnings),
    )


def fold_phase(actions: tuple[str, ...], category: str, artifacts: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The completed actions with those of a finished phase (two or more) folded into one
    line, in place of its first action: its item count, its artefact ids (the newest five)
    and its last action's summary."""
    label = f"[{category.upper()}] "
    mine = [k for k, a in enumerate(actions) if a.startswith(label)]
    if len(mine) < 2:  # a one-action phase is one line already, and says more as it is
        return actions
    shown = ", ".join(list(dict.fromkeys(artifacts))[-5:])
    last = actions[mine[-1]].removeprefix(label)
    line = (
        f"✅ phase {category} ({len(mine)} items)"
        + (f": artefacts {shown}" if shown else "")
        + f"; last: {last}"
    )
    return tuple(line if k == mine[0] else a for k, a in enumerate(actions) if k == mine[0] or k not in mine)


def _dict(data: Mapping[str, Any], key: str, problems: list[str]) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    problems.append(f"{key} is {type(value).__name__}, not an object")
    return {}


def _list(data: Mapping[str, Any], key: str, problems: list[str]) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str | Mapping):
        return [value]
    problems.append(f"{key} is {type(value).__name__}, not a list")
    return []


def _str_dict(value: Any) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    return {"issue": str(value), "resolution": ""}


def parse_step_outputs(data: object, *, fallback_summary: str = FALLBACK_SUMMARY) -> StepOutputs:
    """Validate a model's ``step_done`` outputs; never raises.

    Accepts a dict or a JSON string. A missing or empty ``summary`` falls back to
    ``message`` and then to ``"Step completed"``; wrong-typed fields become
    their defaults. Every repair is logged as one warning, because a step that reports
    badly should be visible without stopping the run.
    """
    problems: list[str] = []
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError:
            problems.append("outputs are not valid JSON")
            data = {}
    if not isinstance(data, Mapping):
        if data is not None:
            problems.append(f"outputs are {type(data).__name__}, not an object")
        else:
            problems.append("outputs are missing")
        data = {}
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        message = data.get("message")
        problems.append("summary is missing or empty")
        summary = message if isinstance(message, str) and message.strip() else fallback_summary
    outputs = StepOutputs(
        summary=summary.strip(),
        environment_changes=_dict(data, "environment_changes", problems),
        new_configurations={k: str(v) for k, v in _dict(data, "new_configurations", problems).items()},
        artifacts=tuple(str(a) for a in _list(data, "artifacts", problems)),
        services_started=tuple(
            dict(s) if isinstance(s, Mapping) else {"name": str(s)}
            for s in _list(data, "services_started", problems)
        ),
        custom_data=_dict(data, "custom_data", problems),
        issues_resolved=tuple(_str_dict(i) for i in _list(data, "issues_resolved", problems)),
    )
    if problems:
        logger.warning("step outputs repaired: %s", "; ".join(problems))
    return outputs


class SummaryManager:
    """Holds the rolling execution summary and folds each step's outputs into it, so the
    prompt carries what the run did without its transcript."""

    MAX_COMPLETED_ACTIONS = MAX_COMPLETED_ACTIONS
    MAX_RESOLVED_ISSUES = MAX_RESOLVED_ISSUES
    MAX_ENVIRONMENT_KEYS = MAX_ENVIRONMENT_KEYS
    MAX_CONFIGURATION_KEYS = MAX_CONFIGURATION_KEYS

    def __init__(
        self,
        project_name: str = "",
        deploy_dir: str = "",
        strategy: str = "",
        *,
        summary: ExecutionSummary | None = None,
    ) -> None:
        self._summary = summary or ExecutionSummary(
            project_name=project_name, deploy_dir=deploy_dir, strategy=strategy
        )

    def merge_step_outputs(
        self,
        step_name: str,
        step_category: str,
        outputs: StepOutputs | Mapping[str, Any] | None,
        *,
        now: str | None = None,
        phase_done: bool = False,
        warn: bool = True,
    ) -> ExecutionSummary:
        """Fold a step's outputs in; raw dicts from a model are validated first.
        ``phase_done``: the step ends its phase, whose actions fold into one line; ``warn``:
        see :func:`merge`."""
        if not isinstance(outputs, StepOutputs):
            outputs = parse_step_outputs(outputs)
        self._summary = merge(
            self._summary,
            outputs,
            step_name=step_name,
            step_category=step_category,
            now=now,
            max_actions=self.MAX_COMPLETED_ACTIONS,
            max_issues=self.MAX_RESOLVED_ISSUES,
            max_environment_keys=self.MAX_ENVIRONMENT_KEYS,
            max_configuration_keys=self.MAX_CONFIGURATION_KEYS,
            phase_done=phase_done,
            warn=warn,
        )
        return self._summary

    def get_summary(self) -> ExecutionSummary:
        return self._summary

    def get_prompt_context(self) -> str:
        return self._summary.to_prompt_context()

    def to_state(self) -> dict[str, Any]:
        return self._summary.to_dict()

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> SummaryManager:
        return cls(summary=ExecutionSummary.from_dict(data))
