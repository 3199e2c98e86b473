"""Output capture: LogChunk cutting, the per-run bound and its truncation mark, scrubbing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.workers.output import OutputCapture, truncation_marker
from tickwheel.workers.secrets import Scrubber


def _capture(limit: int = 100, chunk: int = 40, secrets: tuple[str, ...] = ()) -> OutputCapture:
    return OutputCapture(
        "r-1",
        "job-1",
        2,
        limit_bytes=limit,
        chunk_bytes=chunk,
        scrubber=Scrubber(secrets),
        clock=lambda: 1_000,
    )


def test_chunks_are_cut_in_order_with_ids() -> None:
    """Output becomes LogChunks of at most chunk_bytes, numbered from 0, carrying run and attempt."""
    capture = _capture(limit=1_000, chunk=10)
    capture.write("0123456789abcdefghij")
    capture.write("XYZ")
    capture.close()
    chunks = capture.take()
    assert [c.data for c in chunks] == ["0123456789", "abcdefghij", "XYZ"]
    assert [c.seq for c in chunks] == [0, 1, 2]
    assert {(c.run_id, c.job_id, c.attempt, c.truncated) for c in chunks} == {("r-1", "job-1", 2, False)}


def test_output_beyond_the_limit_is_dropped_and_marked() -> None:
    """At most limit_bytes are kept; the last chunk says truncated and ends with the marker."""
    capture = _capture(limit=25, chunk=10)
    for _ in range(10):
        capture.write("0123456789")
    capture.close()
    chunks = capture.take()
    kept = "".join(c.data for c in chunks)
    assert kept == "0123456789" * 2 + "01234" + truncation_marker(25)
    assert chunks[-1].truncated
    assert not any(c.truncated for c in chunks[:-1])
    assert capture.dropped_bytes == 100 - 25


def test_exactly_at_the_limit_is_not_truncated() -> None:
    """Output that fills the bound exactly is complete, not marked truncated."""
    capture = _capture(limit=20, chunk=10)
    capture.write("x" * 20)
    capture.close()
    assert not capture.truncated
    assert "".join(c.data for c in capture.take()) == "x" * 20


def test_multibyte_text_is_never_split_inside_a_character() -> None:
    """Cuts and the bound are in UTF-8 bytes but never break a character."""
    capture = _capture(limit=10, chunk=4)
    capture.write("ééééééééé")  # 2 bytes each
    capture.close()
    chunks = capture.take()
    assert all(len(c.data.encode()) <= 4 for c in chunks[:-1])
    assert "".join(c.data for c in chunks).startswith("ééééé")
    assert chunks[-1].truncated


def test_secret_split_across_writes_is_scrubbed() -> None:
    """A secret arriving in two writes is masked; held-back text is flushed on close."""
    capture = _capture(limit=1_000, chunk=1_000, secrets=("hunter2",))
    capture.write("password=hun")
    capture.write("ter2\nbye hunt")
    capture.close()
    assert "".join(c.data for c in capture.take()) == "password=***\nbye hunt"


@settings(max_examples=150, deadline=None)
@given(
    writes=st.lists(st.text(alphabet="ab\né€😀", max_size=30), max_size=12),
    limit=st.integers(min_value=4, max_value=60),
    chunk=st.integers(min_value=4, max_value=20),
)
def test_chunks_are_a_bounded_prefix_of_the_output(writes: list[str], limit: int, chunk: int) -> None:
    """Whatever is written, chunks hold a prefix of it within the bound, each at most chunk_bytes."""
    capture = _capture(limit=limit, chunk=min(chunk, limit))
    for text in writes:
        capture.write(text)
    capture.close()
    chunks = capture.take()
    kept = "".join(c.data for c in chunks)
    if capture.truncated:
        kept = kept.removesuffix(truncation_marker(limit))
    assert "".join(writes).startswith(kept)
    assert len(kept.encode()) <= limit
    assert capture.truncated == (len("".join(writes).encode()) > len(kept.encode()))
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert all(len(c.data.encode()) <= min(chunk, limit) for c in chunks if not c.truncated)
