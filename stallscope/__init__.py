"""stallscope: find why LLM token streams freeze (decode starvation, KV-cache pressure)."""

__version__ = "0.1.0"
