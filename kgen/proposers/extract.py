"""Pull a candidate out of an LLM's reply: the fenced block that defines `ModelNew` (the last one if
there are several: models often draft, then correct themselves) and the idea stated before it.

Reasoning (`<think>...</think>`, also `<thinking>`/`<reasoning>`, or everything before a lone `</think>`
when the chat template opened the block in the prompt) is set aside: code in the answer wins; a
reasoning model that wrote its code only while thinking, and finished thinking, gets that code taken."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from kgen.core import pyast

# ```python ... ``` (any info string); a block the reply never closed runs to the end of the text.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.M)
# Reasoning models served by vLLM/Ollama often put their chain of thought in the content.
_THINK = re.compile(r"<(think|thinking|reasoning)>(.*?)(?:</\1>|\Z)", re.S | re.I)
_LONE_CLOSE = re.compile(r"^(?:(?!<(?:think|thinking|reasoning)>).)*?</(think|thinking|reasoning)>", re.S | re.I)
_IDEA_LINE = re.compile(r"^\W*idea\W*[:\-]\s*(.+)$", re.I | re.M)
IDEA_MAX_CHARS = 400


@dataclass
class Extracted:
    source: Optional[str]
    idea: Optional[str]
    error: Optional[str] = None


def _clean_prose(text: str) -> str:
    text = re.sub(r"[*_`#>]+", "", text)
    return " ".join(text.split())


def _idea(prose_before: str, all_prose: str) -> Optional[str]:
    """The idea stated for the chosen code: its `Idea: ...` line (the last one before the code, else
    any), else the last paragraph before the code, else the reply's first paragraph."""
    lines = [_clean_prose(m.group(1)) for m in _IDEA_LINE.finditer(prose_before)]
    lines = [line for line in lines if line] or [_clean_prose(m.group(1)) for m in _IDEA_LINE.finditer(all_prose)]
    if any(lines):
        return next(line for line in reversed(lines) if line)[:IDEA_MAX_CHARS]
    before = [p for p in (_clean_prose(p) for p in re.split(r"\n\s*\n", prose_before)) if p]
    if before:
        return before[-1][:IDEA_MAX_CHARS]
    anywhere = [p for p in (_clean_prose(p) for p in re.split(r"\n\s*\n", all_prose)) if p]
    return anywhere[0][:IDEA_MAX_CHARS] if anywhere else None


def extract_candidate(reply: Optional[str], truncated: bool = False) -> Extracted:
    """The candidate source and idea in `reply`; `source` is None (with `error` saying why) when the
    reply holds no block defining ModelNew. `truncated`: the server stopped at max tokens."""
    if not reply or not reply.strip():
        return Extracted(None, None, "empty response" + (" (cut off at max_tokens)" if truncated else ""))
    reply = reply.replace("\r\n", "\n")  # a closing fence followed by \r is still a closing fence
    lone = _LONE_CLOSE.match(reply)
    if lone:  # DeepSeek-R1 and Qwen3 templates open <think> in the prompt: the reply only closes it
        reply = f"<{lone.group(1)}>{reply}"
    text = _THINK.sub("", reply)
    found = _from_answer(text, truncated)
    if found.source is not None:
        return found
    closed = [m.group(2) for m in _THINK.finditer(reply) if m.group(0).lower().endswith(f"</{m.group(1).lower()}>")]
    if closed:  # the answer holds no code, the finished reasoning does: the model wrote it there
        in_reasoning = _from_answer("\n\n".join(closed), truncated=False)
        if in_reasoning.source is not None:
            return Extracted(in_reasoning.source, found.idea or in_reasoning.idea)
    elif not text.strip() and _THINK.search(reply) and truncated:
        return Extracted(None, None, "the response was cut off at max_tokens while still reasoning "
                                     "(raise --max-tokens)")
    return found


def _from_answer(text: str, truncated: bool) -> Extracted:
    blocks = list(_FENCE.finditer(text))
    prose = "\n\n".join(text[a.end() if a else 0:b.start() if b else len(text)]
                        for a, b in zip([None, *blocks], [*blocks, None]))
    chosen = [i for i, b in enumerate(blocks) if _MODEL_NEW.search(b.group(3))]
    if not chosen:
        if not blocks and _MODEL_NEW.search(text):
            try:  # a bare Python reply with no fences
                pyast.parse(text)
                return Extracted(text.strip() + "\n", None)
            except SyntaxError:
                pass
        what = "no code block" if not blocks else f"{len(blocks)} code block(s), none defining class ModelNew"
        hint = " (the reply was cut off at max_tokens)" if truncated else ""
        return Extracted(None, _idea(text, prose), f"the response held {what}{hint}")
    i = chosen[-1]
    source = blocks[i].group(3).rstrip() + "\n"
    idea = _idea(text[blocks[i - 1].end() if i else 0:blocks[i].start()], prose)
    if truncated:
        try:
            pyast.parse(source)
        except SyntaxError:
            return Extracted(None, idea, "the response was cut off at max_tokens before its code ended "
                                         "(raise --max-tokens)")
    return Extracted(source, idea)
