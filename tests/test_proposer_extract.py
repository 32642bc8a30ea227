"""Code and idea extraction from LLM replies."""

from __future__ import annotations

from kgen.proposers.extract import extract_candidate

CODE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_the_fenced_block_defining_model_new_and_the_idea_line():
    got = extract_candidate(f"Idea: **Fuse** the two passes.\n\n```python\n{CODE}```\nThat is all.")
    assert got.source == CODE and got.idea == "Fuse the two passes." and got.error is None


def test_the_last_block_defining_model_new_wins_with_the_idea_before_it():
    second = CODE.replace("return x", "return x + 0")
    reply = (f"Idea: a first try.\n```python\n{CODE}```\nHelper:\n```python\ndef helper(): pass\n```\n"
             f"Idea: fix the first try.\n```py\n{second}```\n")
    got = extract_candidate(reply)
    assert got.source == second and got.idea == "fix the first try."


def test_without_an_idea_line_the_paragraph_before_the_code_is_the_idea():
    got = extract_candidate(f"Some intro.\n\nTile rows in shared memory\nand vectorize loads.\n\n~~~\n{CODE}~~~\n")
    assert got.idea == "Tile rows in shared memory and vectorize loads."


def test_reasoning_is_ignored_and_code_inside_it_is_not_taken():
    draft = CODE.replace("return x", "return x * 2")
    got = extract_candidate(f"<think>maybe\n```python\n{draft}```\n</think>\nIdea: identity.\n```python\n{CODE}```")
    assert got.source == CODE and got.idea == "identity."
    assert extract_candidate("<think>I will write the kernel" + draft).source is None


def test_a_bare_python_reply_is_taken_and_prose_is_not():
    assert extract_candidate(CODE).source == CODE
    got = extract_candidate("I would define class ModelNew with a Triton kernel.")
    assert got.source is None and "no code block" in got.error


def test_empty_and_truncated_replies_say_why():
    assert extract_candidate(None).error == "empty response"
    cut = extract_candidate(f"Idea: x.\n```python\n{CODE}    def more(self", truncated=True)
    assert cut.source is None and "max_tokens" in cut.error and cut.idea == "x."

