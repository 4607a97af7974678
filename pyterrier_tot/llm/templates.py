"""Chat prompts kept as text files in ``pyterrier_tot/prompts/`` (or any folder of yours).

A prompt file is a chat transcript: a line ``[system]``, ``[user]`` or ``[assistant]`` starts a message, lines
starting with ``#`` before the first message are comments. Few-shot examples are user/assistant pairs; the last
user message holds ``{query}``, replaced by the query text (plain substitution: braces in queries are safe).

Example::

    prompt = load_prompt("extractive_cover")
    prompt.messages("I read it in 2003 ... the cover was green")   # list of {"role", "content"}
    prompt.version                                                 # name + hash of the file's text
"""
from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Dict, List, Union

_HEADER = re.compile(r"^\[(system|user|assistant)\]\s*$")
PLACEHOLDER = "{query}"


class Prompt:
    """A parsed prompt file: ``messages(query)`` fills the placeholder; ``version`` changes with the text."""

    def __init__(self, name: str, text: str):
        self.name = name
        self.template: List[Dict[str, str]] = []
        role, lines = None, []
        for line in text.splitlines():
            m = _HEADER.match(line)
            if m:
                if role is not None:
                    self.template.append({"role": role, "content": "\n".join(lines).strip()})
                role, lines = m.group(1), []
            elif role is not None:
                lines.append(line)
            elif line.strip() and not line.startswith("#"):
                raise ValueError(f"prompt {name!r}: text before the first [system]/[user] header: {line[:60]!r}")
        if role is not None:
            self.template.append({"role": role, "content": "\n".join(lines).strip()})
        if not self.template or self.template[-1]["role"] != "user" or PLACEHOLDER not in self.template[-1]["content"]:
            raise ValueError(f"prompt {name!r} must end with a [user] message containing {PLACEHOLDER}")
        self.version = f"{name}:{hashlib.sha256(text.encode('utf8')).hexdigest()[:12]}"

    def example_answers(self) -> List[str]:
        """The assistant turns of the few-shot examples (what a model that copies its examples would answer)."""
        return [m["content"] for m in self.template if m["role"] == "assistant"]

    def messages(self, query: str) -> List[Dict[str, str]]:
        out = [dict(m) for m in self.template]
        out[-1]["content"] = out[-1]["content"].replace(PLACEHOLDER, str(query).strip())
        return out

    def __repr__(self):
        return f"Prompt({self.version!r}, {len(self.template)} messages)"


@functools.lru_cache(maxsize=None)
def _packaged(name: str) -> str:
    f = resources.files("pyterrier_tot.llm").joinpath(f"prompts/{name}.txt")
    if not f.is_file():
        raise FileNotFoundError(f"no packaged prompt {name!r}; available: {available_prompts()}")
    return f.read_text(encoding="utf8")


def available_prompts() -> List[str]:
    folder = resources.files("pyterrier_tot.llm").joinpath("prompts")
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".txt"))


def load_prompt(name: str, prompt_dir: Union[str, Path, None] = None) -> Prompt:
    """The prompt ``name`` from ``prompt_dir`` when it has ``<name>.txt``, else from the package."""
    if prompt_dir is not None:
        path = Path(prompt_dir) / f"{name}.txt"
        if path.is_file():
            return Prompt(name, path.read_text(encoding="utf8"))
    return Prompt(name, _packaged(name))
