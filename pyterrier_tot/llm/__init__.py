"""The LLM layer: an OpenAI-compatible client with retries and accounting, its sqlite cache, a local llama.cpp
server, and the prompt templates (``prompts/*.txt``)."""
from pyterrier_tot.errors import LLMConfigurationError, LLMFailure, LLMUnavailableError
from pyterrier_tot.llm.cache import LLMCache, request_key
from pyterrier_tot.llm.client import LLM, LLMUsage
from pyterrier_tot.llm.llama_server import LlamaServer, default_gguf
from pyterrier_tot.llm.templates import Prompt, available_prompts, load_prompt

__all__ = ["LLM", "LLMUsage", "LLMCache", "request_key", "LlamaServer", "default_gguf", "Prompt", "available_prompts",
           "load_prompt", "LLMConfigurationError", "LLMFailure",
           "LLMUnavailableError"]
