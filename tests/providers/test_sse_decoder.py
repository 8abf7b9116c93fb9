"""``providers._sse.SSEDecoder``: however a stream is cut into chunks (each chunk one whole
event, as a model stream nearly always arrives and as its fast path takes it, or cut anywhere),
the events are those of the whole stream decoded at once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from providers._sse import SSEDecoder, SSEEvent

_VALUE = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
                 max_size=12).map(lambda s: s.encode())
_LINE = st.one_of(
    _VALUE.map(lambda v: b"data: " + v),
    _VALUE.map(lambda v: b"data:" + v),
    _VALUE.map(lambda v: b"event: " + v),
    st.integers(0, 99).map(lambda n: b"id: %d" % n),
    _VALUE.map(lambda v: b":" + v),
)
_EVENTS = st.lists(st.lists(_LINE, min_size=1, max_size=4), max_size=8)
_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])


def _decode(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    out = [event for chunk in chunks for event in decoder.feed(chunk)]
    return out + decoder.flush()


def _stream(events: list[list[bytes]], end: bytes) -> list[bytes]:
    """Each event's bytes: its lines, then the blank line."""
    return [b"".join(line + end for line in lines) + end for lines in events]


@settings(max_examples=300, deadline=None)
@given(_EVENTS, _ENDS, st.data())
def test_any_cut_decodes_as_the_whole_stream(events: list[list[bytes]], end: bytes,
                                             data: st.DataObject) -> None:
    parts = _stream(events, end)
    whole = b"".join(parts)
    expected = _decode([whole])
    assert _decode(parts) == expected  # one event per chunk
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(whole) - 1, 1)), max_size=6)))
    pieces = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
    assert _decode([p for p in pieces if p]) == expected


def test_one_data_line_per_chunk_keeps_the_last_event_id_and_one_leading_space() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\n') == [SSEEvent("message", '{"a":1}')]
    assert decoder.feed(b"id: 7\ndata: x\n\n") == [SSEEvent("message", "x", "7")]
    assert decoder.feed(b"data:  y\n\n") == [SSEEvent("message", " y", "7")]
    assert decoder.feed(b"data: \xc3") == []  # a character cut in two waits for its end
    assert decoder.feed(b"\xa9\n\n") == [SSEEvent("message", "\u00e9", "7")]
    assert decoder.feed(b"data: a\r\n\r\n") == [SSEEvent("message", "a", "7")]
