from __future__ import annotations

import io
import json
import logging

import pytest
from rich.console import Console

from tether.agent.interaction import (
    REDACTED,
    CallbackInteractionHandler,
    CLIInteractionHandler,
    DeferredInteractionHandler,
    InteractionRequest,
    InteractionResponse,
    InvalidAnswer,
    NonInteractiveHandler,
    PendingQuestion,
    QuestionPending,
    UserInteractionHandler,
    answer_pending,
    validate_answer,
)
from tether.errors import ConfigError, TetherError

PORT = InteractionRequest(
    question="Which port should the app listen on?",
    options=["3000", "8080", "5000"],
    context="Nothing listens on these yet.",
    default_option="8080",
)
TOKEN = InteractionRequest(question="GitHub token for the private registry?", input_type="secret")


def cli(answers: str) -> tuple[CLIInteractionHandler, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=100, color_system=None)
    return CLIInteractionHandler(console, input=io.StringIO(answers)), out


# --- requests ---------------------------------------------------------------------------


def test_request_freezes_options_and_validates_its_shape() -> None:
    """Options become a tuple; unknown input types, empty choices and bad defaults are refused."""
    assert PORT.options == ("3000", "8080", "5000")
    with pytest.raises(ConfigError, match="input_type"):
        InteractionRequest(question="q", input_type="number")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="category"):
        InteractionRequest(question="q", input_type="text", category="chat")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs options"):
        InteractionRequest(question="q")
    with pytest.raises(ConfigError, match="not one of the options"):
        InteractionRequest(question="q", options=["a"], default_option="b")
    with pytest.raises(ConfigError, match="yes or no"):
        InteractionRequest(question="q", input_type="confirm", default_option="maybe")
    with pytest.raises(ConfigError, match="secret"):
        InteractionRequest(question="q", input_type="secret", default_option="hunter2")


def test_handlers_satisfy_the_protocol() -> None:
    """Every handler is a UserInteractionHandler."""
    handlers = [
        CLIInteractionHandler(Console(file=io.StringIO()), input=io.StringIO()),
        CallbackInteractionHandler(lambda r: "x"),
        NonInteractiveHandler(),
        DeferredInteractionHandler(),
    ]
    assert all(isinstance(h, UserInteractionHandler) for h in handlers)


# --- validation -------------------------------------------------------------------------


def test_validate_answer_normalises_each_input_type() -> None:
    """Choices match case-insensitively, confirms become yes/no, blanks take the default."""
    envs = InteractionRequest(question="Env?", options=["Production", "Staging"])
    assert validate_answer(envs, "staging").value == "Staging"
    assert validate_answer(PORT, "").value == "8080"
    confirm = InteractionRequest(question="Go?", input_type="confirm")
    assert validate_answer(confirm, "Y").value == "yes"
    assert validate_answer(confirm, False).value == "no"
    assert validate_answer(confirm, "true").confirmed
    text = InteractionRequest(question="Domain?", input_type="text")
    assert validate_answer(text, "  example.org ").value == "example.org"


def test_invalid_answers_say_what_is_wrong() -> None:
    """Not an option, not yes/no, blank without default: InvalidAnswer (a TetherError and ValueError)."""
    with pytest.raises(InvalidAnswer, match=r"'9999' is not one of the options: 3000, 8080, 5000") as info:
        validate_answer(PORT, "9999")
    assert isinstance(info.value, TetherError) and isinstance(info.value, ValueError)
    assert info.value.request_id == PORT.id
    with pytest.raises(InvalidAnswer, match="expected yes or no"):
        validate_answer(InteractionRequest(question="Go?", input_type="confirm"), "perhaps")
    with pytest.raises(InvalidAnswer, match="answer is required"):
        validate_answer(InteractionRequest(question="Domain?", input_type="text"), "   ")
    with pytest.raises(InvalidAnswer, match="needs text"):
        validate_answer(InteractionRequest(question="Domain?", input_type="text"), True)
    ambiguous = InteractionRequest(question="Which?", options=["Web", "WEB"])
    with pytest.raises(InvalidAnswer):
        validate_answer(ambiguous, "web")


# --- secrets ----------------------------------------------------------------------------


def test_secret_answer_never_shows_in_repr_str_or_dict() -> None:
    """Only reveal() returns the secret; repr, str, to_dict and JSON show the marker."""
    response = validate_answer(TOKEN, "ghp_s3cr3tTOKEN")
    assert response.is_secret and response.value == REDACTED
    assert response.reveal() == "ghp_s3cr3tTOKEN"
    for shown in (repr(response), str(response), json.dumps(response.to_dict()), f"{response}"):
        assert "s3cr3t" not in shown
    assert response.to_dict() == {
        "value": REDACTED,
        "cancelled": False,
        "is_secret": True,
        "answered_by": "user",
    }


def test_secret_given_directly_is_hidden_too() -> None:
    """InteractionResponse(value=..., is_secret=True) moves the value out of sight at once."""
    response = InteractionResponse(value="pa55word", is_secret=True)
    assert "pa55word" not in repr(response) and response.reveal() == "pa55word"


def test_secret_stored_without_opt_in_is_withheld() -> None:
    """A round trip through to_dict drops the secret; reveal_secret=True keeps it, explicitly."""
    response = validate_answer(TOKEN, "pa55word")
    back = InteractionResponse.from_dict(json.loads(json.dumps(response.to_dict())))
    assert back.withheld and back.reveal() is None and back.value == REDACTED
    kept = InteractionResponse.from_dict(response.to_dict(reveal_secret=True))
    assert kept.reveal() == "pa55word" and not kept.withheld and "pa55word" not in repr(kept)


async def test_secret_never_reaches_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Every handler and answer_pending log the marker, never the secret."""
    caplog.set_level(logging.DEBUG)
    handler, out = cli("hunter2-secret\n")
    assert (await handler.ask(TOKEN)).reveal() == "hunter2-secret"
    callback = CallbackInteractionHandler(lambda r: InteractionResponse(value="hunter2-secret"))
    forgot = await callback.ask(TOKEN)  # the callback forgot is_secret: still hidden
    assert forgot.is_secret and forgot.reveal() == "hunter2-secret"
    pending = answer_pending(PendingQuestion(request=TOKEN), "hunter2-secret")
    assert pending.answer is not None and pending.answer.reveal() == "hunter2-secret"
    assert "hunter2" not in json.dumps(pending.to_dict())
    assert "hunter2" not in caplog.text and "hunter2" not in out.getvalue()
    assert REDACTED in caplog.text


# --- CLI --------------------------------------------------------------------------------


async def test_cli_choice_by_text_number_or_default() -> None:
    """An option's text, its number, or Enter for the default."""
    handler, out = cli("5000\n1\n\n")
    assert (await handler.ask(PORT)).value == "5000"
    assert (await handler.ask(PORT)).value == "3000"
    assert (await handler.ask(PORT)).value == "8080"
    shown = out.getvalue()
    assert "? [decision] Which port should the app listen on?" in shown
    assert "Nothing listens on these yet." in shown
    assert "2. 8080 (default)" in shown


async def test_cli_reasks_on_an_invalid_choice() -> None:
    """A wrong option is refused with a message and asked again."""
    handler, out = cli("9999\n8080\n")
    response = await handler.ask(PORT)
    assert response.value == "8080" and response.answered_by == "user"
    assert "Please select one of the available options" in out.getvalue()


async def test_cli_confirm_text_and_secret() -> None:
    """Confirm takes y/n (Enter = default), text is trimmed, a secret is read but never echoed."""
    handler, out = cli("y\n\nexample.org\ntopsecret\n")
    go = InteractionRequest(question="Open port 80?", input_type="confirm", category="confirmation")
    assert (await handler.ask(go)).value == "yes"
    assert (await handler.ask(go)).value == "no"  # no default_option: Enter means no
    domain = InteractionRequest(question="Domain?", input_type="text", category="information")
    assert (await handler.ask(domain)).value == "example.org"
    secret = await handler.ask(TOKEN)
    assert secret.reveal() == "topsecret" and "topsecret" not in out.getvalue()


async def test_cli_end_of_input_cancels() -> None:
    """EOF (Ctrl-D, a closed pipe) cancels instead of looping."""
    handler, _ = cli("")
    response = await handler.ask(PORT)
    assert response.cancelled and response.value is None


async def test_cli_gives_up_after_max_attempts_on_blank_text() -> None:
    """A required text answered blank three times is cancelled."""
    handler, out = cli("\n\n\nlate\n")
    domain = InteractionRequest(question="Domain?", input_type="text")
    assert (await handler.ask(domain)).cancelled
    assert out.getvalue().count("an answer is required") == 3


async def test_cli_escapes_markup_in_model_text() -> None:
    """A question containing rich markup is printed literally."""
    handler, out = cli("a\n")
    odd = InteractionRequest(question="Use [bold]a[/bold] or [red]b?", options=["a", "b"])
    await handler.ask(odd)
    assert "Use [bold]a[/bold] or [red]b?" in out.getvalue()


# --- callback ---------------------------------------------------------------------------


async def test_callback_sync_and_async() -> None:
    """A plain function or a coroutine function; plain strings are accepted as answers."""
    seen: list[InteractionRequest] = []

    def sync(request: InteractionRequest) -> InteractionResponse:
        seen.append(request)
        return InteractionResponse(value="3000")

    async def asynchronous(request: InteractionRequest) -> str:
        return "5000"

    assert (await CallbackInteractionHandler(ask_callback=sync).ask(PORT)).value == "3000"
    response = await CallbackInteractionHandler(asynchronous).ask(PORT)
    assert response.value == "5000" and response.answered_by == "callback"
    assert seen == [PORT]


async def test_callback_answers_are_validated_and_none_cancels() -> None:
    """A wrong option raises InvalidAnswer; None or a cancelled response cancels."""
    with pytest.raises(InvalidAnswer):
        await CallbackInteractionHandler(lambda r: "1234").ask(PORT)
    assert (await CallbackInteractionHandler(lambda r: None).ask(PORT)).cancelled
    cancel = InteractionResponse(cancelled=True, answered_by="gui")
    assert (await CallbackInteractionHandler(lambda r: cancel).ask(PORT)) == cancel


# --- non-interactive --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "policy", "expected"),
    [
        (PORT, "default", "8080"),
        (InteractionRequest(question="Port?", options=["3000", "8080"]), "default", None),
        (InteractionRequest(question="Port?", options=["3000", "8080"]), "first", "3000"),
        (PORT, "cancel", None),
        (InteractionRequest(question="Overwrite?", input_type="confirm"), "default", "no"),
        (
            InteractionRequest(question="Overwrite?", input_type="confirm", default_option="y"),
            "default",
            "yes",
        ),
        (InteractionRequest(question="Overwrite?", input_type="confirm", default_option="y"), "cancel", None),
        (InteractionRequest(question="Domain?", input_type="text"), "first", None),
        (
            InteractionRequest(question="Domain?", input_type="text", default_option="localhost"),
            "default",
            "localhost",
        ),
        (TOKEN, "first", None),
    ],
)
async def test_non_interactive_policies(
    request_: InteractionRequest, policy: str, expected: str | None
) -> None:
    """Declared defaults; 'no' for an undefaulted confirm; first option only under 'first'; else cancel."""
    response = await NonInteractiveHandler(policy=policy).ask(request_)  # type: ignore[arg-type]
    assert response.value == expected
    assert response.cancelled is (expected is None)
    assert response.answered_by == "non-interactive"


def test_non_interactive_rejects_unknown_policy() -> None:
    """A typo in the policy is a ConfigError."""
    with pytest.raises(ConfigError, match="policy"):
        NonInteractiveHandler(policy="yes")  # type: ignore[arg-type]


# --- pending questions ------------------------------------------------------------------


async def test_pending_question_round_trip_answered_later() -> None:
    """Deferred → JSON in a checkpoint → loaded elsewhere, answered, stored → resumed run reads it."""
    handler = DeferredInteractionHandler(run_id="run-1")
    with pytest.raises(QuestionPending) as info:
        await handler.ask(PORT)
    stored = json.dumps(info.value.pending.to_dict())  # what the checkpoint holds

    elsewhere = PendingQuestion.from_dict(json.loads(stored))
    assert elsewhere.request == PORT and elsewhere.run_id == "run-1" and not elsewhere.answered
    answered = answer_pending(elsewhere, "5000", answered_by="ops@example.org")
    stored = json.dumps(answered.to_dict())

    resumed = PendingQuestion.from_dict(json.loads(stored))
    assert resumed.answer == InteractionResponse(value="5000", answered_by="ops@example.org")
    assert resumed.answered_at is not None
    again = DeferredInteractionHandler(answers={PORT.id: resumed.answer})
    assert (await again.ask(PORT)).value == "5000"


def test_answer_pending_validates_and_refuses_twice() -> None:
    """A wrong answer is refused; a second answer to an answered question is refused."""
    pending = PendingQuestion(request=PORT)
    with pytest.raises(InvalidAnswer, match="not one of the options"):
        answer_pending(pending, "1")
    done = answer_pending(pending, "3000")
    with pytest.raises(InvalidAnswer, match="already answered"):
        answer_pending(done, "5000")
    cancelled = answer_pending(pending, None, cancelled=True)
    assert cancelled.answer is not None and cancelled.answer.cancelled


def test_malformed_pending_question_is_a_config_error() -> None:
    """Missing keys or a bad request come back as ConfigError, not KeyError."""
    with pytest.raises(ConfigError, match="malformed"):
        PendingQuestion.from_dict({"asked_at": "now"})
    bad = PendingQuestion(request=PORT).to_dict()
    bad["request"]["input_type"] = "number"
    with pytest.raises(ConfigError, match="input_type"):
        PendingQuestion.from_dict(bad)
