"""The context engine: keep a long-running agent's prompt inside its window.

Exact token counts cached per item, a four-layer window under a budget,
threshold events at 70/85/90%, compressors that never drop what is pinned, the rolling
execution summary, and the report summaries and history window.
See docs/context.md. Importing this package does not import tiktoken.
"""

from __future__ import annotations

from tether.context.artifacts import (
    ArtifactNotFound,
    ArtifactStore,
    FileArtifactStore,
    InMemoryArtifactStore,
    archive_items,
    load_archived_items,
)
from tether.context.background import BackgroundCompressor
from tether.context.compress import (
    DEEP_TARGET,
    STANDARD_TARGET,
    SUMMARY_ID,
    CompressionLevel,
    CompressionResult,
    compress,
    compress_async,
    compress_phase,
    fit,
    group_units,
)
from tether.context.distill import step_outputs_from_commands
from tether.context.facts import OperationFacts, extract_operation, extract_output
from tether.context.history import (
    HistoryEntry,
    HistoryWindow,
    build_history_window,
    detect_milestones,
    parse_history,
)
from tether.context.items import (
    PROTECTED_KINDS,
    ContextItem,
    ItemCounter,
    ItemKind,
    Layer,
    new_item,
)
from tether.context.monitor import Thresholds, UsageEvent, UsageMonitor
from tether.context.policy import ContextEvent, ContextPolicy
from tether.context.recovery import call_with_recovery, is_prompt_too_long
from tether.context.reports import (
    ReportCache,
    ReportSummary,
    choose_level,
    extract_report_summary,
    format_report,
    read_report_summary,
)
from tether.context.summaries import (
    ExecutionSummary,
    StepOutputs,
    SummaryManager,
    merge,
    parse_step_outputs,
)
from tether.context.summarizer import (
    AsyncSummarizer,
    CompletionModel,
    LLMSummarizer,
    StructuredSummarizer,
    Summarizer,
    SummaryRequest,
)
from tether.context.tokens import (
    ANTHROPIC_FORMAT,
    MODEL_TABLE,
    OPENAI_FORMAT,
    CalibratedTokenizer,
    Calibration,
    HeuristicTokenizer,
    MessageFormat,
    ModelSpec,
    TiktokenTokenizer,
    Tokenizer,
    count_messages,
    count_tools,
    model_spec,
    tokenizer_for_model,
)
from tether.context.trim import TrimmedOutput, trim_item, trim_output
from tether.context.window import ContextWindow, LayerUsage, WindowUsage, window_from_run_state

__all__ = [
    "window_from_run_state",
    "ContextEvent",
    "ContextPolicy",
    "OperationFacts",
    "extract_operation",
    "extract_output",
    "step_outputs_from_commands",
    "ANTHROPIC_FORMAT",
    "DEEP_TARGET",
    "MODEL_TABLE",
    "OPENAI_FORMAT",
    "PROTECTED_KINDS",
    "STANDARD_TARGET",
    "SUMMARY_ID",
    "ArtifactNotFound",
    "ArtifactStore",
    "AsyncSummarizer",
    "BackgroundCompressor",
    "CalibratedTokenizer",
    "Calibration",
    "CompletionModel",
    "CompressionLevel",
    "CompressionResult",
    "ContextItem",
    "ContextWindow",
    "ExecutionSummary",
    "FileArtifactStore",
    "HeuristicTokenizer",
    "HistoryEntry",
    "HistoryWindow",
    "InMemoryArtifactStore",
    "ItemCounter",
    "ItemKind",
    "LLMSummarizer",
    "Layer",
    "LayerUsage",
    "MessageFormat",
    "ModelSpec",
    "ReportCache",
    "ReportSummary",
    "StepOutputs",
    "StructuredSummarizer",
    "Summarizer",
    "SummaryManager",
    "SummaryRequest",
    "Thresholds",
    "TiktokenTokenizer",
    "Tokenizer",
    "TrimmedOutput",
    "UsageEvent",
    "UsageMonitor",
    "WindowUsage",
    "archive_items",
    "build_history_window",
    "call_with_recovery",
    "choose_level",
    "compress",
    "compress_async",
    "compress_phase",
    "count_messages",
    "count_tools",
    "detect_milestones",
    "extract_report_summary",
    "fit",
    "format_report",
    "group_units",
    "is_prompt_too_long",
    "load_archived_items",
    "merge",
    "model_spec",
    "new_item",
    "parse_history",
    "parse_step_outputs",
    "read_report_summary",
    "tokenizer_for_model",
    "trim_item",
    "trim_output",
]
