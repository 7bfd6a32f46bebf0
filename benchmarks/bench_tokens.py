"""Token counts against the counts the OpenAI API reported, and what counting costs over
raw tiktoken.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_tokens.py            # 3 runs
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_tokens.py --quick    # 1 run, a smaller chat

1. Counting cost, both offline encodings (cl100k, o200k): ``TiktokenTokenizer.count`` over
   every string of a seeded corpus chat (user prose, tool-call arguments, tool results of
   JSON rows, log lines and code), interleaved with its floor, tiktoken's
   ``encode_ordinary`` doing the same work (``len`` of each text's tokens, nothing kept),
   timed eight messages at a time, line after line, in one order and then the other (fine
   interleaving: a burst of host noise lands on both lines, and neither always runs on the
   caches the other warmed); a round is the whole chat. Printed: tokens a second (median
   round) and tether / floor twice, by the median round and by the sum of each batch's best
   time (noise only ever adds time, so the best of each is the steadier ratio on a busy host).
   Beside them, ``count_messages`` on the same chat (the request's
   framing: roles, tool calls rendered as OpenAI frames them). Every text is counted anew
   each pass: no cache sits between the timer and tiktoken. The tokens are summed in every
   pass and checked equal.
2. Residual error against ``prompt_tokens`` the OpenAI API reported for twelve
   single-message requests, published with the requests by the
   openai-messages-token-helper project (github.com/pamelafox/openai-messages-token-helper,
   tests/messages.py: gpt-4 / cl100k and gpt-4o / o200k).
3. Tool calls: ten requests with assistant tool calls and tool results whose
   ``prompt_tokens`` the API reported for gpt-4-turbo (cl100k), published with the tests of
   the chrisdinn/tokens Go package, counted with tether's tool-call framing and, as the
   baseline, with the name + arguments counted before; and the tool definitions of the
   OpenAI cookbook's example ("How to count tokens with tiktoken": 105 tokens on gpt-4, 101
   on gpt-4o).
4. What counting an o200k model with cl100k (tether's previous default) over-counts, per
   kind of text: seeded mixes of distinct sentences per language, and corpus prose, code and
   logs (the error a model family counted through an approximation carries).

Targets (the claims of docs/context.md; counts are exact integers, the same on every host):
0 tokens of error on each of the 12 published requests, for each encoding; 0 on each of the
10 tool-call requests; 0 on the cookbook's tool definitions, for each encoding. The counting
cost has no target: its lines show what tether adds over tiktoken (the ratio, in one run).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable
from typing import Any

from harness import Report, corpus, interleave

from tether.context import count_messages, count_tools
from tether.context.tokens import (
    ENCODING_NAME,
    O200K_NAME,
    MessageFormat,
    TiktokenTokenizer,
    load_encoding,
)

PUBLISHED = [  # (message, count for gpt-4 / cl100k, count for gpt-4o / o200k)
    ({"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."}, 25, 24),
    ({"role": "system", "content": "You are a bot."}, 12, 12),
    ({"role": "system", "content": "Assistant helps the company employees with their healthcare plan questions, and questions about the employee handbook. Be brief in your answers."}, 31, 31),
    ({"role": "system", "content": "á"}, 8, 8),
    ({"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."}, 20, 20),
    ({"role": "user", "content": "Hello, how are you?"}, 13, 13),
    ({"role": "user", "content": "á"}, 8, 8),
    ({"role": "user", "content": "What happens in a performance review?"}, 14, 14),
    ({"role": "user", "content": "Is there a dress code?"}, 13, 13),
    ({"role": "user", "content": "What does a Product Manager do?"}, 14, 14),
    ({"role": "assistant", "content": "During the performance review at Contoso Electronics, the supervisor will discuss the employee's performance over the past year and provide feedback on areas for improvement. They will also provide an opportunity for the employee to discuss their goals and objectives for the upcoming year. The review is a two-way dialogue between managers and employees, and employees will receive a written summary of their performance review which will include a rating of their performance, feedback, and goals and objectives for the upcoming year [employee_handbook-3.pdf]."}, 106, 106),
    ({"role": "assistant", "content": "Yes, there is a dress code at Contoso Electronics. Look sharp! [employee_handbook-1.pdf]"}, 30, 30),
]  # fmt: skip


SENTENCES = {  # distinct sentences per language, mixed by a seeded generator (section 4)
    "Chinese": [
        "部署已完成，健康检查在两百毫秒内返回成功。",
        "请确认数据库迁移已经执行，并检查索引是否重建。",
        "缓存节点在凌晨三点重启，之后请求延迟明显下降。",
        "订单服务的错误率上升到百分之二，需要回滚上一个版本。",
        "日志显示连接池已满，工作进程正在等待空闲连接。",
        "我们计划在周五发布新版本，并在周一检查监控指标。",
        "测试覆盖率达到百分之八十五，剩余的失败与网络超时有关。",
        "请把配置文件中的端口改为八零八零，然后重新加载服务。",
    ],
    "Japanese": [
        "デプロイが完了し、ヘルスチェックは二百ミリ秒以内に応答しました。",
        "データベースの移行が実行されたことを確認してください。",
        "キャッシュノードは午前三時に再起動し、その後レイテンシが下がりました。",
        "注文サービスのエラー率が二パーセントに上がったので、前のバージョンに戻します。",
        "ログによると接続プールが満杯で、ワーカーは空き接続を待っています。",
        "金曜日に新しいバージョンをリリースし、月曜日に監視指標を確認します。",
        "テストのカバレッジは八十五パーセントで、残りの失敗はネットワークのタイムアウトです。",
        "設定ファイルのポートを八〇八〇に変更してから、サービスを再読み込みしてください。",
    ],
    "Korean": [
        "배포가 완료되었고 상태 검사가 이백 밀리초 이내에 응답했습니다.",
        "데이터베이스 마이그레이션이 실행되었는지 확인해 주세요.",
        "캐시 노드가 새벽 세 시에 재시작된 뒤 요청 지연 시간이 줄었습니다.",
        "주문 서비스의 오류율이 이 퍼센트로 올라 이전 버전으로 되돌립니다.",
        "로그를 보면 연결 풀이 가득 차서 작업자가 빈 연결을 기다리고 있습니다.",
        "금요일에 새 버전을 출시하고 월요일에 모니터링 지표를 확인하겠습니다.",
        "테스트 커버리지는 팔십오 퍼센트이며 남은 실패는 네트워크 시간 초과 때문입니다.",
        "설정 파일의 포트를 팔공팔공으로 바꾼 뒤 서비스를 다시 불러오세요.",
    ],
    "Russian": [
        "Развертывание завершено, проверка состояния ответила за двести миллисекунд.",
        "Проверьте, что миграция базы данных выполнена и индексы перестроены.",
        "Узел кэша перезапустился в три часа ночи, после этого задержка снизилась.",
        "Доля ошибок сервиса заказов выросла до двух процентов, откатываем версию.",
        "По журналу пул соединений заполнен, и рабочие процессы ждут свободного соединения.",
        "Мы выпустим новую версию в пятницу и проверим метрики в понедельник.",
        "Покрытие тестами достигло восьмидесяти пяти процентов, остальные сбои связаны с таймаутами сети.",
        "Измените порт в файле настроек на 8080 и перезагрузите сервис.",
    ],
    "Arabic": [
        "اكتمل النشر واستجاب فحص الحالة في غضون مئتي جزء من الثانية.",
        "يرجى التأكد من تنفيذ ترحيل قاعدة البيانات وإعادة بناء الفهارس.",
        "أعيد تشغيل عقدة التخزين المؤقت في الثالثة صباحا وانخفض زمن الاستجابة بعدها.",
        "ارتفع معدل أخطاء خدمة الطلبات إلى اثنين بالمئة، لذلك سنعود إلى الإصدار السابق.",
        "يظهر السجل أن مجمع الاتصالات ممتلئ وأن العمال ينتظرون اتصالا متاحا.",
        "سنصدر النسخة الجديدة يوم الجمعة ونراجع مؤشرات المراقبة يوم الاثنين.",
        "بلغت تغطية الاختبارات خمسة وثمانين بالمئة، والإخفاقات الباقية سببها انتهاء مهلة الشبكة.",
        "غير المنفذ في ملف الإعدادات إلى 8080 ثم أعد تحميل الخدمة.",
    ],
    "Hindi": [
        "परिनियोजन पूरा हुआ और स्वास्थ्य जांच ने दो सौ मिलीसेकंड में उत्तर दिया।",
        "कृपया पुष्टि करें कि डेटाबेस माइग्रेशन चल चुका है और इंडेक्स फिर से बने हैं।",
        "कैश नोड रात तीन बजे फिर से शुरू हुआ और उसके बाद विलंब कम हो गया।",
        "ऑर्डर सेवा की त्रुटि दर दो प्रतिशत तक बढ़ गई, इसलिए पिछला संस्करण वापस लाएंगे।",
        "लॉग बताते हैं कि कनेक्शन पूल भरा है और वर्कर खाली कनेक्शन का इंतजार कर रहे हैं।",
        "हम शुक्रवार को नया संस्करण जारी करेंगे और सोमवार को निगरानी के आंकड़े देखेंगे।",
        "परीक्षण कवरेज पचासी प्रतिशत है, बाकी विफलताएं नेटवर्क टाइमआउट के कारण हैं।",
        "सेटिंग फ़ाइल में पोर्ट को 8080 करें और फिर सेवा को दोबारा लोड करें।",
    ],
    "emoji status lines": [
        "Deployed 🚀 all checks green ✅",
        "Rollback done 🔙 error rate back to 0.1% 📉",
        "Cache warm 🔥 p95 at 41 ms ⏱️",
        "Review approved 👍🏽 merging now 🎉",
        "Disk at 91% ⚠️ rotating logs 🧹",
        "Night shift handover 🌙 nothing paging 😴",
    ],
}


def mixed(rng: random.Random, sentences: list[str], n: int) -> str:
    """``n`` sentences drawn from ``sentences`` (seeded), with the odd line break."""
    return "".join(rng.choice(sentences) + ("\n" if rng.random() < 0.15 else " ") for _ in range(n))


def code(seed: int, n_chars: int) -> str:
    """Python code from the corpus (its tool outputs are JSON, logs or code: the first seed
    from ``seed`` on whose output is code)."""
    while not (text := corpus.tool_output(random.Random(seed), n_chars)).startswith("def "):
        seed += 1
    return text


def chat_texts(chat: list[dict[str, Any]]) -> list[str]:
    """Every string ``count_messages`` tokenizes in ``chat``: contents, tool names, arguments."""
    texts: list[str] = []
    for m in chat:
        texts.append(m["content"])
        for call in m.get("tool_calls") or ():
            texts += [call["function"]["name"], call["function"]["arguments"]]
    return texts


def fine_interleave(
    batches: list[dict[str, Callable[[], object]]], rounds: int
) -> dict[str, list[list[float]]]:
    """Seconds of each line on each batch (a few messages) in each round: every batch is timed
    line after line (:func:`interleave`), in one order for even batches and the reverse for
    odd ones, so a burst of host noise lands on every line alike and no line always runs on
    the caches another warmed. One warm-up round is not kept."""
    names = list(batches[0])
    out: dict[str, list[list[float]]] = {name: [[] for _ in batches] for name in names}
    for r in range(rounds + 1):
        for k, funcs in enumerate(batches):
            order = names if (k + r) % 2 == 0 else names[::-1]
            t = interleave({name: funcs[name] for name in order}, rounds=1, warmup=0)
            if r:
                for name in names:
                    out[name][k].append(t[name][0])
    return out


def counting_cost(rep: Report, chat: list[dict[str, Any]], rounds: int) -> None:
    slices = [chat[i : i + 8] for i in range(0, len(chat), 8)]
    texts = chat_texts(chat)
    for name in (ENCODING_NAME, O200K_NAME):
        encode = load_encoding(name).encode_ordinary
        tok = TiktokenTokenizer(name)
        total = sum(len(encode(t)) for t in texts)
        sums: dict[str, list[int]] = {"floor": [], "tether": []}
        batches = []
        for part in slices:
            part_texts = chat_texts(part)
            batches.append(
                {
                    "floor": lambda ts=part_texts, e=encode, n=sums["floor"]: n.append(
                        sum(len(e(t)) for t in ts)
                    ),
                    "tether": lambda ts=part_texts, k=tok, n=sums["tether"]: n.append(
                        sum(k.count(t) for t in ts)
                    ),
                    "request": lambda m=part, k=tok: count_messages(m, k),
                }
            )
        times = fine_interleave(batches, rounds)
        assert sum(sums["floor"]) == sum(sums["tether"]) == total * (rounds + 1), "the counts differ"
        per_round = {k: [sum(b[r] for b in v) for r in range(rounds)] for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in per_round.items()}
        best = {k: sum(min(b) for b in v) for k, v in times.items()}  # noise only ever adds
        rep.section(
            f"counting cost, {name}: {len(texts):,} texts, {total:,} tokens, {sum(map(len, texts)):,} characters"
        )
        rep.line("floor: tiktoken encode_ordinary, len of each", total / med["floor"] / 1e6, "M tokens/s",
                 note=f"median of {rounds} rounds, {med['floor'] * 1e3:.1f} ms")  # fmt: skip
        rep.line("tether: TiktokenTokenizer.count", total / med["tether"] / 1e6, "M tokens/s",
                 note=f"{med['tether'] * 1e3:.1f} ms")  # fmt: skip
        rep.line("tether / floor, median round", med["tether"] / med["floor"], "x")
        rep.line("tether / floor, sum of each batch's best", best["tether"] / best["floor"], "x",
                 note=f"{len(batches)} batches of 8 messages")  # fmt: skip
        rep.line("count_messages on the chat (framing included)", med["request"] * 1e3, "ms",
                 note=f"{count_messages(chat, tok):,} tokens, {len(chat)} messages, as {len(slices)} requests of 8")  # fmt: skip


def published(rep: Report) -> None:
    rep.section("published single-message requests: count_messages against the API's prompt_tokens")
    for label, name, col in (("gpt-4 (cl100k)", ENCODING_NAME, 1), ("gpt-4o (o200k)", O200K_NAME, 2)):
        tok = TiktokenTokenizer(name)
        errors = [count_messages([m[0]], tok) - m[col] for m in PUBLISHED]  # type: ignore[list-item]
        rep.line(f"{label}: requests exact", sum(e == 0 for e in errors), note=f"of {len(errors)}")
        rep.target(
            f"{label}: largest error on a published request", max(map(abs, errors)), goal=0, unit="tokens"
        )


def tool_calls(rep: Report) -> None:
    rep.section("tool calls: count_messages against the API's prompt_tokens (gpt-4-turbo, cl100k)")
    tok = TiktokenTokenizer(ENCODING_NAME)
    now_err, before_err = [], []
    for label, messages, reported in TOOL_CALLS:
        now, before = count_messages(messages, tok), count_messages(messages, tok, NAME_AND_ARGUMENTS)
        now_err.append(now - reported)
        before_err.append(before - reported)
        rep.line(
            f"{label}: API {reported}, tether", now, "tokens", note=f"name + arguments (before): {before}"
        )
    rep.line("baseline, name + arguments: largest error", max(map(abs, before_err)), "tokens",
             note="errors " + ", ".join(f"{e:+d}" for e in before_err))  # fmt: skip
    rep.target("tool-call framing: largest error", max(map(abs, now_err)), goal=0, unit="tokens")
    rep.section("tool definitions, the cookbook's example request")
    for label, name, reported in (
        ("gpt-4 (cl100k)", ENCODING_NAME, 105),
        ("gpt-4o (o200k)", O200K_NAME, 101),
    ):
        t = TiktokenTokenizer(name)
        messages = count_messages(COOKBOOK_MESSAGES, t)
        now = messages + count_tools(COOKBOOK_TOOLS, t)
        rep.line(f"{label}: messages alone (before)", messages, "tokens", note=f"API {reported}")
        rep.target(f"{label}: tool definitions, error", abs(now - reported), goal=0, unit="tokens")


def languages(rep: Report, seed: int) -> None:
    rep.section("o200k models counted with cl100k (the previous default): over-count per kind of text")
    rng = random.Random(seed)
    texts = {kind: mixed(rng, s, 60) for kind, s in SENTENCES.items()}
    texts["English prose"] = corpus.prose(rng, 6_000)
    texts["Python code"] = code(seed, 6_000)
    texts["log lines"] = corpus.log_lines(rng, 60)
    texts["JSON rows"] = corpus.json_blob(rng, 6_000)
    cl100k, o200k = TiktokenTokenizer(ENCODING_NAME), TiktokenTokenizer(O200K_NAME)
    for kind, text in texts.items():
        a, b = cl100k.count(text), o200k.count(text)
        rep.line(f"{kind}: cl100k / o200k tokens", a / b, "x", note=f"{a:,} / {b:,}")


def _call(call_id: str, args: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "get_current_weather", "arguments": args}}


def _ski(place: str, args: str, output: str, text: str | None = None) -> list[dict[str, object]]:
    return [
        {"role": "user", "content": f"I want to ski at {place} this weekend."},
        {"role": "assistant", "content": text, "tool_calls": [_call("a", args)]},
        {"role": "tool", "content": output, "tool_call_id": "a"},
    ]


KILLINGTON = '{"location": "Killington, VT", "format": "fahrenheit", "temperature": "45"}'
TOOL_CALLS = [  # (label, request, prompt_tokens reported by the API for gpt-4-turbo)
    ("call with text, text output", _ski("Breckenridge", '{"location": "Breckenridge, CO"}', "The weather in Breckenridge, CO is 38 degrees.", "I can help with that."), 70),
    ("1 arg, JSON output (1 key)", _ski("Vail", '{"location": "Vail, CO"}', '{"temperature": "35"}'), 50),
    ("1 arg, JSON output (2 keys)", _ski("Park City", '{"location": "Park City, UT"}', '{"location": "Park City, UT", "temperature": "45"}'), 59),
    ("1 arg, JSON output (3 keys)", _ski("Whistler", '{"location": "Whistler, BC"}', '{"location": "Whistler, BC", "format": "fahrenheit", "temperature": "45"}'), 69),
    ("no args, empty output", [{"role": "user", "content": "What's the weather?"}, *_ski("x", "{}", "{}")[1:]], 33),
    ("no args, JSON output", [{"role": "user", "content": "What's the weather?"}, *_ski("x", "{}", '{"temperature": "45"}')[1:]], 38),
    ("1 arg", _ski("Killington", '{"location": "Killington, VT"}', KILLINGTON), 66),
    ("2 args", _ski("Killington", '{"location": "Killington, VT", "unit": "celsius"}', KILLINGTON), 71),
    ("3 args", _ski("Killington", '{"location": "Killington, VT", "unit": "celsius", "date": "2024-03-28"}', KILLINGTON), 80),
    ("2 parallel calls, 2 outputs", [
        {"role": "user", "content": "Should I ski at Killington or Tremblant this weekend?"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a", '{"location": "Killington, VT"}'), _call("b", '{"location": "Mount Tremblant, QC"}')]},
        {"role": "tool", "content": "The weather in Killington, VT is 45 degrees.", "tool_call_id": "a"},
        {"role": "tool", "content": "The weather at Mount Tremblant, QC is 32 degrees.", "tool_call_id": "b"}], 111),
]  # fmt: skip
COOKBOOK_TOOLS = [{"type": "function", "function": {
    "name": "get_current_weather", "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]},
    }, "required": ["location"]}}}]  # fmt: skip
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]
NAME_AND_ARGUMENTS = MessageFormat(
    name="openai-before", per_message=3, per_name=1, reply_priming=3, count_role=True
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run, a 150 KB chat, 3 rounds")
    parser.add_argument("--runs", type=int, default=None, help="repetitions (default 3; 1 with --quick)")
    parser.add_argument(
        "--chat-kb", type=int, default=None, help="the chat counted (default 600; 150 with --quick)"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds over the chat (default 9; 3 with --quick)"
    )
    args = parser.parse_args()
    chat = corpus.messages(34, (args.chat_kb or (150 if args.quick else 600)) * 1000)
    rep = Report("bench_tokens", "token counts against the API's, and counting cost against raw tiktoken")
    for run in rep.runs(args.runs or (1 if args.quick else 3)):
        counting_cost(rep, chat, args.rounds or (3 if args.quick else 9))
        published(rep)
        tool_calls(rep)
        if run == 1:  # counts, the same every run
            languages(rep, 34)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
