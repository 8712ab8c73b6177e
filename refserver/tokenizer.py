"""Byte-level tokenizer: token i < 256 is byte i; then BOS, EOS, PAD; the vocabulary is padded to 264."""

from __future__ import annotations


class ByteTokenizer:
    """UTF-8 bytes in, bytes out. Example: `ByteTokenizer().encode("hi") == [104, 105]`."""

    bos_token_id = 256
    eos_token_id = 257
    pad_token_id = 258
    vocab_size = 264

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def token_text(self, token_id: int) -> str:
        """One token as text for logprobs: its byte (U+FFFD if not UTF-8 by itself), or `<bos>`/`<eos>`/`<pad>`."""
        special = {self.bos_token_id: "<bos>", self.eos_token_id: "<eos>", self.pad_token_id: "<pad>"}
        return special.get(token_id) or bytes([token_id]).decode("utf-8", errors="replace")

    def decode(self, token_ids) -> str:
        return bytes(t for t in token_ids if 0 <= t < 256).decode("utf-8", errors="replace")
