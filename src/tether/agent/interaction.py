"""Asking the human: questions from the agent, answers from a terminal, a callback or a policy.

The agent's ``ask_user`` action becomes an :class:`InteractionRequest`; a
:class:`UserInteractionHandler` turns it into an :class:`InteractionResponse`:

* :class:`CLIInteractionHandler` asks on a terminal with rich prompts (secret input hidden);
* :class:`CallbackInteractionHandler` hands the request to your function (sync or async);
* :class:`NonInteractiveHandler` answers unattended runs by policy and never blocks;
* :class:`DeferredInteractionHandler` raises :class:`QuestionPending` so the run can be
  checkpointed with a :class:`PendingQuestion` and answered later, from another process,
  with :func:`answer_pending`.

Secret answers (``input_type="secret"``) are kept out of ``repr``, ``str`` and
``to_dict()``: ``response.value`` is the marker :data:`REDACTED` and only
``response.reveal()`` returns what was typed, so a secret cannot reach a log line, a
prompt or the experience store by accident.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import IO, Any, Literal, Protocol, cast, get_args, runtime_checkable

from tether.errors import ConfigError, TetherError

__all__ = [
    "REDACTED",
    "CallbackInteractionHandler",
    "CLIInteractionHandler",
    "DeferredInteractionHandler",
    "InputType",
    "InteractionRequest",
    "InteractionResponse",
    "InvalidAnswer",
    "NonInteractiveHandler",
    "PendingQuestion",
    "QuestionCategory",
    "QuestionPending",
    "UserInteractionHandler",
    "answer_pending",
    "validate_answer",
]

logger = logging.getLogger(__name__)

InputType = Literal["choice", "text", "confirm", "secret"]
QuestionCategory = Literal["decision", "confirmation", "information", "error_recovery"]

REDACTED = "[secret]"
"""What a secret answer shows wherever it could be printed, logged or serialised."""

_YES = frozenset({"y", "yes", "true", "1", "on"})
_NO = frozenset({"n", "no", "false", "0", "off"})


class InvalidAnswer(TetherError, ValueError):
    """An answer that does not fit its question (not an option, empty, not yes/no)."""

    def __init__(self, message: str, *, request_id: str = "") -> None:
        super().__init__(message)
        self.request_id = request_id


class QuestionPending(Exception):
    # a control-flow signal, not an error: no "Error" suffix (STYLE §2)
    """Raised by :class:`DeferredInteractionHandler`: checkpoint ``pending`` and pause."""

    def __init__(self, pending: PendingQuestion) -> None:
        super().__init__(f"question {pending.request.id} is waiting for an answer")
        self.pending = pending


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class InteractionRequest:
    """A question for the human, as the model asked it."""

    question: str
    """What to ask, one or two sentences."""
    options: Sequence[str] = ()
    """The allowed answers of a ``choice`` question (stored as a tuple)."""
    input_type: InputType = "choice"
    """``choice`` (one of ``options``), ``text``, ``confirm`` (yes/no) or ``secret`` (hidden)."""
    category: QuestionCategory = "decision"
    """``decision``, ``confirmation``, ``information`` or ``error_recovery``."""
    context: str | None = None
    """Why the agent asks: shown under the question."""
    default_option: str | None = None
    """The answer taken on an empty reply or by a non-interactive policy."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Stable id, so a stored question can be matched with its answer later."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(str(o) for o in self.options))
        if self.input_type not in get_args(InputType):
            raise ConfigError(
                f"input_type must be one of {', '.join(get_args(InputType))}, not {self.input_type!r}"
            )
        if self.category not in get_args(QuestionCategory):
            raise ConfigError(
                f"category must be one of {', '.join(get_args(QuestionCategory))}, not {self.category!r}"
            )
        if not self.question.strip():
            raise ConfigError("a question needs some text")
        if self.input_type == "choice" and not self.options:
            raise ConfigError("a choice question needs options; use input_type='text' for free text")
        if self.input_type == "choice" and self.default_option not in (None, *self.options):
            raise ConfigError(f"default_option {self.default_option!r} is not one of the options")
        default = (self.default_option or "").strip().lower()
        if self.input_type == "confirm" and self.default_option is not None and default not in _YES | _NO:
            raise ConfigError(f"a confirm default_option must be yes or no, not {self.default_option!r}")
        if self.input_type == "secret" and self.default_option is not None:
            raise ConfigError("a secret question cannot have a default_option (it would be in the prompt)")

    def to_dict(self) -> dict[str, Any]:
        """JSON-like form (for checkpoints and run logs)."""
        return {
            "id": self.id,
            "question": self.question,
            "options": list(self.options),
            "input_type": self.input_type,
            "category": self.category,
            "context": self.context,
            "default_option": self.default_option,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InteractionRequest:
        """Inverse of :meth:`to_dict`; raises :class:`~tether.errors.ConfigError` on bad data."""
        try:
            return cls(
                id=str(data["id"]),
                question=str(data["question"]),
                options=tuple(data.get("options") or ()),
                input_type=data.get("input_type", "choice"),
                category=data.get("category", "decision"),
                context=data.get("context"),
                default_option=data.get("default_option"),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"malformed interaction request: {exc!r}") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class InteractionResponse:
    """The human's answer.

    For a secret (``is_secret=True``) the typed value is moved out of ``value`` at
    construction: ``value`` becomes :data:`REDACTED` and only :meth:`reveal` returns
    the real text. ``repr``, ``str`` and :meth:`to_dict` therefore never show it.
    """

    value: str | None = None
    """The answer (``yes``/``no`` for confirm; :data:`REDACTED` for a secret; None if cancelled)."""
    cancelled: bool = False
    """The human (or the policy) declined to answer: the run should stop cleanly."""
    is_secret: bool = False
    """The answer is a secret: hidden everywhere except :meth:`reveal`."""
    answered_by: str = "user"
    """Who answered: ``user``, ``callback``, ``non-interactive``..."""
    _secret: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.cancelled:
            object.__setattr__(self, "value", None)
        elif self.is_secret and self.value is not None and self.value != REDACTED:
            object.__setattr__(self, "_secret", self.value)
            object.__setattr__(self, "value", REDACTED)

    def reveal(self) -> str | None:
        """The raw answer, secret or not. Pass it only where it is needed (a command's env).

        A secret read back from :meth:`from_dict` was withheld when it was stored, so
        this returns None for it (see :attr:`withheld`).
        """
        return self._secret if self.is_secret else self.value

    @property
    def withheld(self) -> bool:
        """A secret answer whose value was not stored (serialised without ``reveal_secret``)."""
        return self.is_secret and not self.cancelled and self._secret is None

    @property
    def confirmed(self) -> bool:
        """For a confirm question: the answer was yes."""
        return not self.cancelled and self.value == "yes"

    def __str__(self) -> str:
        return "<cancelled>" if self.cancelled else str(self.value)

    def to_dict(self, *, reveal_secret: bool = False) -> dict[str, Any]:
        """JSON-like form; a secret shows as :data:`REDACTED`.

        Args:
            reveal_secret: include the secret itself (only for an encrypted checkpoint
                that must carry the answer to another process).
        """
        data: dict[str, Any] = {
            "value": self.value,
            "cancelled": self.cancelled,
            "is_secret": self.is_secret,
            "answered_by": self.answered_by,
        }
        if reveal_secret and self.is_secret and self._secret is not None:
            data["secret"] = self._secret
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InteractionResponse:
        """Inverse of :meth:`to_dict` (a secret stored without its value stays withheld)."""
        is_secret = bool(data.get("is_secret", False))
        value = data.get("secret") if is_secret else data.get("value")
        if is_secret and value is None and not data.get("cancelled"):
            value = REDACTED
        return cls(
            value=None if value is None else str(value),
            cancelled=bool(data.get("cancelled", False)),
            is_secret=is_secret,
            answered_by=str(data.get("answered_by", "user")),
        )


@runtime_checkable
class UserInteractionHandler(Protocol):
    """Something that can answer the agent's questions."""

    async def ask(self, request: InteractionRequest) -> InteractionResponse:
        """Answer ``request``; a refusal is ``InteractionResponse(cancelled=True)``."""
        ...


def _parse_yes_no(value: str | bool, request_id: str) -> bool:
    if isinstance(value, bool):
        return value
    text = value.strip().lower()
    if text in _YES:
        return True
    if text in _NO:
        return False
    raise InvalidAnswer(f"expected yes or no, got {value!r}", request_id=request_id)


def validate_answer(
    request: InteractionRequest, value: str | bool | None, *, answered_by: str = "user"
) -> InteractionResponse:
    """Check and normalise an answer to ``request``.

    * ``choice``: one of the options (exact, else a unique case-insensitive match);
    * ``confirm``: yes/no, y/n, true/false, 1/0 or a bool, stored as ``"yes"``/``"no"``;
    * ``text``: any non-blank text;
    * ``secret``: any non-empty text, hidden in the response.

    A blank answer takes ``default_option`` when there is one. Raises
    :class:`InvalidAnswer` otherwise.
    """
    rid = request.id
    if value is None or (isinstance(value, str) and not value.strip()):
        if request.default_option is None:
            raise InvalidAnswer(f"an answer is required for {request.question!r}", request_id=rid)
        value = request.default_option
    if request.input_type == "confirm":
        answer = "yes" if _parse_yes_no(value, rid) else "no"
        return InteractionResponse(value=answer, answered_by=answered_by)
    if isinstance(value, bool):
        raise InvalidAnswer(f"a {request.input_type} question needs text, not {value!r}", request_id=rid)
    if request.input_type == "secret":
        return InteractionResponse(value=value, is_secret=True, answered_by=answered_by)
    text = value.strip()
    if request.input_type == "choice" and text not in request.options:
        folded = [o for o in request.options if o.casefold() == text.casefold()]
        if len(folded) != 1:
            choices = ", ".join(request.options)
            raise InvalidAnswer(f"{text!r} is not one of the options: {choices}", request_id=rid)
        text = folded[0]
    return InteractionResponse(value=text, answered_by=answered_by)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingQuestion:
    """A question waiting for its answer, storable in a checkpoint (``to_dict``/``from_dict``).

    The run that asked stops with it in its state; another process loads it, calls
    :func:`answer_pending` and stores the result; the resumed run reads :attr:`answer`.
    """

    request: InteractionRequest
    """The question."""
    asked_at: str = field(default_factory=_now)
    """When it was asked (ISO 8601, UTC)."""
    run_id: str | None = None
    """The run that asked, if known."""
    iteration: int | None = None
    """The loop iteration that asked, if known."""
    answer: InteractionResponse | None = None
    """None until answered."""
    answered_at: str | None = None
    """When it was answered (ISO 8601, UTC)."""

    @property
    def answered(self) -> bool:
        """An answer (possibly a cancellation) is present."""
        return self.answer is not None

    def to_dict(self, *, reveal_secret: bool = False) -> dict[str, Any]:
        """JSON-like form. A secret answer is withheld unless ``reveal_secret``."""
        return {
            "request": self.request.to_dict(),
            "asked_at": self.asked_at,
            "run_id": self.run_id,
            "iteration": self.iteration,
            "answer": None if self.answer is None else self.answer.to_dict(reveal_secret=reveal_secret),
            "answered_at": self.answered_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingQuestion:
        """Inverse of :meth:`to_dict`; raises :class:`~tether.errors.ConfigError` on bad data."""
        try:
            answer = data.get("answer")
            iteration = data.get("iteration")
            return cls(
                request=InteractionRequest.from_dict(data["request"]),
                asked_at=str(data["asked_at"]),
                run_id=data.get("run_id"),
                iteration=None if iteration is None else int(iteration),
                answer=None if answer is None else InteractionResponse.from_dict(answer),
                answered_at=data.get("answered_at"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"malformed pending question: {exc!r}") from exc


def answer_pending(
    pending: PendingQuestion,
    value: str | bool | None,
    *,
    cancelled: bool = False,
    answered_by: str = "user",
) -> PendingQuestion:
    """Answer a stored question: validates ``value`` and returns the answered copy.

    Raises:
        InvalidAnswer: the answer does not fit the question, or it is already answered.
    """
    if pending.answer is not None:
        raise InvalidAnswer(
            f"question {pending.request.id} was already answered by {pending.answer.answered_by}",
            request_id=pending.request.id,
        )
    if cancelled:
        secret = pending.request.input_type == "secret"
        response = InteractionResponse(cancelled=True, is_secret=secret, answered_by=answered_by)
    else:
        response = validate_answer(pending.request, value, answered_by=answered_by)
    logger.info(
        "pending question %s answered by %s: %s",
        pending.request.id,
        answered_by,
        response,
        extra={"run_id": pending.run_id},
    )
    return replace(pending, answer=response, answered_at=_now())


class DeferredInteractionHandler:
    """Never answers: raises :class:`QuestionPending` so the run can stop and be resumed.

    Give it ``answers`` (request id → response) to return answers that arrived
    while the run was stopped.
    """

    def __init__(
        self,
        *,
        run_id: str | None = None,
        answers: Mapping[str, InteractionResponse] | None = None,
    ) -> None:
        self.run_id = run_id
        self._answers = dict(answers or {})

    async def ask(self, request: InteractionRequest) -> InteractionResponse:
        """The stored answer for ``request.id``, else raise :class:`QuestionPending`."""
        if request.id in self._answers:
            return self._answers.pop(request.id)
        raise QuestionPending(PendingQuestion(request=request, run_id=self.run_id))


Answer = InteractionResponse | str | bool | None
AskCallback = Callable[[InteractionRequest], Answer | Awaitable[Answer]]


class CallbackInteractionHandler:
    """Answers through ``ask_callback(request)``, sync or async.

    The callback returns an :class:`InteractionResponse`, or just the answer (str or
    bool; None cancels). Answers are validated against the request, and the answer to
    a secret question is always marked secret even if the callback forgot to.
    A sync callback runs on the event loop's thread: keep it short or make it async.
    """

    def __init__(self, ask_callback: AskCallback) -> None:
        self.ask_callback = ask_callback

    async def ask(self, request: InteractionRequest) -> InteractionResponse:
        """Call the callback and validate what it returns."""
        result = self.ask_callback(request)
        answer = await result if inspect.isawaitable(result) else result
        if answer is None:
            return InteractionResponse(cancelled=True, answered_by="callback")
        if isinstance(answer, InteractionResponse):
            if answer.cancelled:
                return answer
            raw = answer.reveal()
            checked = validate_answer(request, raw, answered_by=answer.answered_by)
        else:
            checked = validate_answer(request, answer, answered_by="callback")
        logger.debug("question %s answered by %s: %s", request.id, checked.answered_by, checked)
        return checked


class NonInteractiveHandler:
    """Answers unattended runs by policy; never blocks, never invents a secret.

    Policies:

    * ``"default"``: take ``default_option``; a confirm without one is answered "no";
      anything else without a default (choice, text) is cancelled.
    * ``"first"``: like ``"default"``, and a choice without a default takes the first option.
    * ``"cancel"``: cancel every question.

    A secret question is always cancelled.
    """

    def __init__(self, policy: Literal["default", "first", "cancel"] = "default") -> None:
        if policy not in ("default", "first", "cancel"):
            raise ConfigError(f"policy must be 'default', 'first' or 'cancel', not {policy!r}")
        self.policy = policy

    def decide(self, request: InteractionRequest) -> InteractionResponse:
        """The answer the policy gives to ``request`` (pure)."""
        by = "non-interactive"
        if self.policy == "cancel" or request.input_type == "secret":
            return InteractionResponse(cancelled=True, answered_by=by)
        if request.default_option is not None:
            return validate_answer(request, request.default_option, answered_by=by)
        if request.input_type == "confirm":
            return InteractionResponse(value="no", answered_by=by)
        if request.input_type == "choice" and self.policy == "first":
            return InteractionResponse(value=request.options[0], answered_by=by)
        return InteractionResponse(cancelled=True, answered_by=by)

    async def ask(self, request: InteractionRequest) -> InteractionResponse:
        """Answer by policy and log the decision."""
        response = self.decide(request)
        logger.info(
            "question %s (%s) answered non-interactively (policy=%s): %s",
            request.id,
            request.category,
            self.policy,
            response,
        )
        return response


class _LineInput:
    """A text stream for rich prompts: strips the newline, raises EOFError at the end."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def readline(self) -> str:
        line = self._stream.readline()
        if not line:
            raise EOFError
        return line.rstrip("\r\n")


class CLIInteractionHandler:
    """Asks on a terminal with rich prompts.

    Args:
        console: where to print (default: a new ``rich.console.Console()``).
        input: where to read answers from. None reads the terminal, with secret input
            hidden (``password=True``). A given stream (a pipe, a file, ``io.StringIO``)
            is read line by line; nothing typed is ever echoed back by the handler.
        max_attempts: invalid answers tolerated before the question counts as cancelled.

    End of input or Ctrl-C cancels the question. The prompt runs in a worker thread so
    the event loop keeps running while the human thinks.
    """

    def __init__(
        self, console: Any | None = None, *, input: IO[str] | None = None, max_attempts: int = 3
    ) -> None:
        from rich.console import Console  # the CLI's dependency; imported when used

        self.console: Console = console if console is not None else Console()
        self._input = None if input is None else _LineInput(input)
        self.max_attempts = max_attempts

    async def ask(self, request: InteractionRequest) -> InteractionResponse:
        """Show the question and read the answer (cancelled on EOF or Ctrl-C)."""
        try:
            response = await asyncio.to_thread(self._ask_sync, request)
        except (EOFError, KeyboardInterrupt):
            response = InteractionResponse(cancelled=True, is_secret=request.input_type == "secret")
        logger.debug("question %s answered on the terminal: %s", request.id, response)
        return response

    def _show(self, request: InteractionRequest) -> None:
        from rich.markup import escape

        label = request.category.replace("_", " ")
        self.console.print(f"\n[bold cyan]? {escape(f'[{label}]')}[/] [bold]{escape(request.question)}[/]")
        if request.context:
            self.console.print(f"  [dim]{escape(request.context)}[/]")
        if request.input_type == "choice":
            for n, option in enumerate(request.options, 1):
                marker = " (default)" if option == request.default_option else ""
                self.console.print(f"  {n}. {escape(option)}{marker}")

    def _read(self, request: InteractionRequest) -> str | bool:
        from rich.prompt import Confirm, Prompt

        stream = cast(Any, self._input)
        if request.input_type == "confirm":
            default = request.default_option is not None and _parse_yes_no(request.default_option, request.id)
            return Confirm.ask("Confirm", console=self.console, default=default, stream=stream)
        if request.input_type == "secret":
            # getpass reads the terminal itself; a scripted stream is read as is (never echoed)
            return Prompt.ask("Secret", console=self.console, password=stream is None, stream=stream)
        if request.input_type == "choice":
            # accept the option's number as well as its text
            numbers = [str(n) for n in range(1, len(request.options) + 1) if str(n) not in request.options]
            choices = [*request.options, *numbers]
            if request.default_option is None:
                answer = Prompt.ask(
                    "Choice",
                    console=self.console,
                    choices=choices,
                    show_choices=False,
                    case_sensitive=False,
                    stream=stream,
                )
            else:
                answer = Prompt.ask(
                    "Choice",
                    console=self.console,
                    choices=choices,
                    show_choices=False,
                    case_sensitive=False,
                    default=request.default_option,
                    stream=stream,
                )
            if answer in numbers:
                return request.options[int(answer) - 1]
            return answer
        return Prompt.ask("Answer", console=self.console, default=request.default_option or "", stream=stream)

    def _ask_sync(self, request: InteractionRequest) -> InteractionResponse:
        self._show(request)
        for _ in range(self.max_attempts):
            try:
                return validate_answer(request, self._read(request), answered_by="user")
            except InvalidAnswer as exc:
                from rich.markup import escape

                self.console.print(f"[red]{escape(str(exc))}[/]")
        self.console.print("[yellow]No valid answer; the question is cancelled.[/]")
        return InteractionResponse(cancelled=True, is_secret=request.input_type == "secret")
