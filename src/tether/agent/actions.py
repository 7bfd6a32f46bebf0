"""What a model may answer, parsed leniently, validated strictly.

Parsing tolerates what models do to JSON (code fences, prose around it, a trailing
comma is not tolerated: that is invalid JSON and goes back to the model). Meaning is
checked by pydantic: an ``execute`` without a command or an unknown action type is a
:class:`ModelOutputError` whose message the loop sends back to the model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tether.errors import ModelOutputError
from tether.models.replies import parse_json_reply

__all__ = ["ACTION_TYPES", "AgentAction", "extract_json", "parse_action"]

ACTION_TYPES = ("execute", "done", "failed", "ask_user", "step_done", "read_artifact")


class AgentAction(BaseModel):
    """One decision of the model."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    action_type: Literal["execute", "done", "failed", "ask_user", "step_done", "read_artifact"] = Field(
        alias="action"
    )
    command: str | None = None
    reasoning: str | None = None
    message: str | None = None
    question: str | None = None
    options: list[str] | None = None
    input_type: Literal["choice", "text", "confirm", "secret"] = "choice"
    category: Literal["decision", "confirmation", "information", "error_recovery"] = "decision"
    context: str | None = None
    default_option: str | None = None
    outputs: dict[str, Any] | None = None
    """``step_done`` only: the step's StepOutputs."""
    artifact_id: str | None = None
    """``read_artifact`` only: the id a trimmed output names."""
    start: int | None = Field(default=None, ge=1)
    """``read_artifact``: first line (or byte), 1-based; default the start."""
    end: int | None = Field(default=None, ge=1)
    """``read_artifact``: last line (or byte), inclusive; default the end."""
    unit: Literal["lines", "bytes"] = "lines"
    probe: str | None = None
    """``execute`` only: a command exiting 0 when this command's effect is in place and 1
    when it is not; run instead of asking a person if a crash cuts the command."""

    @model_validator(mode="after")
    def _required_fields(self) -> AgentAction:
        need = {
            "execute": "command",
            "done": "message",
            "failed": "message",
            "ask_user": "question",
            "read_artifact": "artifact_id",
        }
        field = need.get(self.action_type)
        if field and not (getattr(self, field) or "").strip():
            raise ValueError(f'"{self.action_type}" needs a non-empty "{field}"')
        if self.action_type == "ask_user" and self.input_type == "choice" and not self.options:
            raise ValueError('"ask_user" with input_type "choice" needs "options"')
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


def extract_json(text: str) -> dict[str, Any]:
    """The action object: the whole reply, or the contents of a code fence; never JSON
    quoted inside prose (a refusal that quotes a command must not run it)."""
    return parse_json_reply(text, in_prose=False)


def parse_action(text: str) -> AgentAction:
    """Parse and validate a model reply; ModelOutputError says what to fix."""
    data = extract_json(text)
    if "action" not in data and "action_type" in data:
        data["action"] = data.pop("action_type")
    try:
        return AgentAction.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'reply'}: {err['msg']}" for err in exc.errors()
        )
        raise ModelOutputError(f"invalid action ({problems})", raw=text) from None
