"""Pull a candidate out of an LLM's reply: the fenced block that defines `ModelNew` (the last one if
there are several: models often draft, then correct themselves) and the idea stated before it."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

# ```python ... ``` (any info string); a block the reply never closed runs to the end of the text.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.M)
# Reasoning models served by vLLM/Ollama often put their chain of thought in the content.
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
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
    """An explicit `Idea: ...` line wins; else the last paragraph before the code; else the first one."""
    m = _IDEA_LINE.search(all_prose)
    if m and _clean_prose(m.group(1)):
        return _clean_prose(m.group(1))[:IDEA_MAX_CHARS]
    for prose in (prose_before, all_prose):
        paragraphs = [_clean_prose(p) for p in re.split(r"\n\s*\n", prose)]
        paragraphs = [p for p in paragraphs if p]
        if paragraphs:
            return (paragraphs[-1] if prose is prose_before else paragraphs[0])[:IDEA_MAX_CHARS]
    return None


def extract_candidate(reply: Optional[str], truncated: bool = False) -> Extracted:
    """The candidate source and idea in `reply`; `source` is None (with `error` saying why) when the
    reply holds no block defining ModelNew. `truncated`: the server stopped at max tokens."""
    if not reply or not reply.strip():
        return Extracted(None, None, "empty response")
    text = _THINK.sub("", reply)
    blocks = list(_FENCE.finditer(text))
    with_model = [b for b in blocks if _MODEL_NEW.search(b.group(3))]
    if not with_model:
        if not blocks and _MODEL_NEW.search(text):
            try:  # a bare Python reply with no fences
                ast.parse(text)
                return Extracted(text.strip() + "\n", None)
            except SyntaxError:
                pass
        what = "no code block" if not blocks else f"{len(blocks)} code block(s), none defining class ModelNew"
        hint = " (the reply was cut off at max_tokens)" if truncated else ""
        return Extracted(None, _idea(text, text), f"the response held {what}{hint}")
    block = with_model[-1]
    source = block.group(3).rstrip() + "\n"
    prose_parts, last = [], 0
    for b in blocks:
        prose_parts.append(text[last:b.start()])
        last = b.end()
    prose_parts.append(text[last:])
    prose_before = text[blocks[blocks.index(block) - 1].end() if blocks.index(block) else 0:block.start()]
    idea = _idea(prose_before, "\n\n".join(prose_parts))
    if truncated:
        try:
            ast.parse(source)
        except SyntaxError:
            return Extracted(None, idea, "the response was cut off at max_tokens before its code ended "
                                         "(raise --max-tokens)")
    return Extracted(source, idea)


def guess_language(source: str) -> str:
    """triton | cuda | unknown, from what the source uses to define its kernels."""
    if re.search(r"load_inline|cpp_extension|__global__", source):
        return "cuda"
    if re.search(r"@triton\.(jit|autotune)|import triton", source):
        return "triton"
    return "unknown"
