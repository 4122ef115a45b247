from hypothesis import given, settings
from hypothesis import strategies as st

from ragassay.pipeline.chunkers import chunk_text, sentence_spans
from ragassay.pipeline.tokens import count_tokens, token_spans

ALPHABET = st.sampled_from(list("abc XYZ.,!?\n\t-'é") + ["\n\n", ". ", "word ", "über "])
TEXTS = st.lists(ALPHABET, max_size=300).map("".join)


def _covered(text, chunks):
    spans = token_spans(text)
    for s, e in spans:
        assert any(c.start <= s and e <= c.end for c in chunks), f"token {text[s:e]!r} at {s} not in any chunk"


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, size=st.integers(1, 40), overlap=st.integers(0, 39))
def test_fixed_chunks_round_trip_and_cover_every_token(text, size, overlap):
    overlap = overlap % size
    chunks = chunk_text("d", text, "fixed", size, overlap)
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert c.tokens == count_tokens(c.text) <= size
        assert c.text == c.text.strip() and c.text
    _covered(text, chunks)


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, size=st.integers(1, 40), kind=st.sampled_from(["recursive", "sentence"]))
def test_recursive_and_sentence_chunks_partition_tokens(text, size, kind):
    chunks = chunk_text("d", text, kind, size)
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert c.tokens == count_tokens(c.text) <= size
    # no overlap: each token in exactly one chunk, and chunks come in text order
    assert sum(c.tokens for c in chunks) == count_tokens(text)
    assert all(a.end <= b.start for a, b in zip(chunks, chunks[1:], strict=False))
    _covered(text, chunks)


def test_fixed_windows_by_hand():
    text = "a b c d e f g"
    chunks = chunk_text("d", text, "fixed", 3, 1)
    assert [c.text for c in chunks] == ["a b c", "c d e", "e f g"]
    assert [(c.start, c.end) for c in chunks] == [(0, 5), (4, 9), (8, 13)]


def test_recursive_prefers_paragraph_boundaries():
    text = "One two three.\n\nFour five six.\n\nSeven eight."
    chunks = chunk_text("d", text, "recursive", 8)
    assert [c.text for c in chunks] == ["One two three.\n\nFour five six.", "Seven eight."]


def test_sentence_spans_by_hand():
    text = "First one. Second one!\n\nHeading\n\nThird?"
    got = [text[a:b] for a, b in sentence_spans(text)]
    assert got == ["First one.", "Second one!", "Heading", "Third?"]
