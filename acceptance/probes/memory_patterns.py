"""Memory patterns: a buffer of 64-bit words written with a known pattern, read back, every bad word counted.

The patterns are memtest's classics (memtest86+, "Test descriptions"), one whole-buffer pass each, in turn:

* walking ones: every word the same single bit set, the bit moving one place each time its turn comes, so
  that every data line is driven alone;
* random: words from a seeded generator (Philox on GPUs), regenerated from the same seed to check;
* address in address: every word holds its own index (its complement on every other turn), so a write that
  lands at the wrong address, or a read from the wrong one, shows.

A pass writes the whole buffer, then reads it all back, chunk by chunk: the time between a word's write and
its read is a whole buffer's writing. Counting stays on the device; the first bad word is looked for only
when a pass's count went up (the buffer still holds what was read wrong), so a healthy pass costs no copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from acceptance.families.soak import Bad, MemoryRecord

CHUNK_WORDS = 1 << 26  # 512 MiB of words per generated chunk: the temporary the checks need beside the buffer
PATTERNS = ("walking_ones", "random", "address")


@dataclass
class MemoryPatterns:
    buffer: torch.Tensor  # int64 words
    seed: int
    chunk: int = CHUNK_WORDS
    passes: int = 0
    by_pattern: dict[str, int] = field(default_factory=dict)
    first_bad: Bad | None = None
    _bad: torch.Tensor | None = None  # on the device: bad words so far
    _seen: int = 0  # the count when last read on the host
    _last: tuple[str, int] = (PATTERNS[0], 0)  # the last pass's pattern and turn

    def __post_init__(self) -> None:
        self._bad = torch.zeros((), dtype=torch.int64, device=self.buffer.device)

    @classmethod
    def allocate(cls, nbytes: int, device: torch.device, seed: int) -> MemoryPatterns:
        return cls(torch.empty(max(1, nbytes // 8), dtype=torch.int64, device=device), seed)

    def _spans(self) -> list[tuple[int, int]]:
        n = self.buffer.numel()
        return [(start, min(n, start + self.chunk)) for start in range(0, n, self.chunk)]

    def _want(self, name: str, turn: int, start: int, end: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """Fills ``out`` (the words [start, end)) with the pattern and returns it."""
        device = self.buffer.device
        if name == "walking_ones":
            bit = turn % 64
            value = -(1 << 63) if bit == 63 else 1 << bit  # bit 63 is the int64 sign bit

            return lambda out: out.fill_(value)
        if name == "random":
            gen = torch.Generator(device=device)
            gen.manual_seed((self.seed * 1_000_003 + turn * 7919 + start) % (1 << 63))
            return lambda out: out.random_(generator=gen)
        flip = turn % 2 == 1

        def address(out: torch.Tensor) -> torch.Tensor:
            torch.arange(start, end, dtype=torch.int64, device=device, out=out)
            return out.bitwise_not_() if flip else out

        return address

    def run_pass(self, corrupt: bool = False) -> None:
        """One pattern over the whole buffer: write it all, then read it all back. ``corrupt``: flip a bit
        of one word between the write and the read (the test-only fault knob)."""
        name = PATTERNS[self.passes % len(PATTERNS)]
        turn = self.by_pattern.get(name, 0)
        spans = self._spans()
        for start, end in spans:
            self._want(name, turn, start, end)(self.buffer[start:end])
        if corrupt:
            middle = self.buffer.numel() // 2
            self.buffer[middle : middle + 1].bitwise_xor_(1 << 20)
        scratch = torch.empty(min(self.chunk, self.buffer.numel()), dtype=torch.int64, device=self.buffer.device)
        for start, end in spans:
            want = self._want(name, turn, start, end)(scratch[: end - start])
            assert self._bad is not None
            self._bad += (self.buffer[start:end] != want).sum()
        self.passes += 1
        self.by_pattern[name] = turn + 1
        self._last = (name, turn)

    def bad_words(self) -> int:
        """The count so far (a copy to the host: call it at a round's end). The first time it rises, the
        last pass is read again to find the first bad word."""
        assert self._bad is not None
        found = int(self._bad.item())
        if found > self._seen and self.first_bad is None:
            self.first_bad = self._locate(*self._last)
        self._seen = found
        return found

    def _locate(self, name: str, turn: int) -> Bad:
        scratch = torch.empty(min(self.chunk, self.buffer.numel()), dtype=torch.int64, device=self.buffer.device)
        for start, end in self._spans():
            want = self._want(name, turn, start, end)(scratch[: end - start])
            wrong = (self.buffer[start:end] != want).nonzero()
            if wrong.numel():
                i = int(wrong[0, 0].item())
                word = start + i
                address = self.buffer.data_ptr() + 8 * word
                return {
                    "where": f"{name} pass, word {word:,} (byte offset {8 * word:#x}, address {address:#x})",
                    "got": f"{int(self.buffer[word].item()) & (2**64 - 1):#018x}",
                    "want": f"{int(want[i].item()) & (2**64 - 1):#018x}",
                }
        # counted wrong, read right the second time: a transient error
        return {"where": f"{name} pass (not seen again on a second read: transient)", "got": "?", "want": "?"}

    def record(self) -> MemoryRecord:
        return {
            "bytes": self.buffer.numel() * 8,
            "passes": self.passes,
            "patterns": dict(self.by_pattern),
            "bad_words": self.bad_words(),
            "first_bad": self.first_bad,
            "asked_bytes": 0,  # the soak sets what it asked for
        }
