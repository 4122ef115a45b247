"""The page's compressed query data is deflated on a worker thread in ~1 MB blocks: the stream must be the
bytes one deflate of the whole JSON gives (so the page does not change), and inflate back to that JSON."""

from __future__ import annotations

import base64
import zlib

import pytest

from ragassay.report import html as html_module


def _payload(n: int) -> dict:
    return {"id": [f"q{i:06d}" for i in range(n)], "question": [f"What does clause {i} say? <b>&</b>" for i in range(n)],
            "runs": [{"metrics": {"f1": [round(i / n, 6) for i in range(n)]}}], "n": n}


@pytest.mark.parametrize("block", [1, 4_096, 1 << 20], ids=["every-piece", "small-blocks", "default"])
def test_blocked_deflate_is_one_deflate_of_the_whole_json(monkeypatch, block):
    monkeypatch.setattr(html_module, "COMPRESS_ABOVE", 1_000)
    monkeypatch.setattr(html_module, "_DEFLATE_BLOCK", block)
    payload = _payload(20_000)
    text = "".join(html_module._json_pieces(payload))
    assert text == html_module.script_json(payload)
    one = zlib.compressobj(1, zlib.DEFLATED, -15)
    want = one.compress(text.encode("utf-8")) + one.flush()
    out = html_module._embed(html_module._json_pieces(payload))
    assert out["encoding"] == "deflate-base64" and out["json_bytes"] == len(text.encode("utf-8"))
    packed = base64.b64decode(str(out["json"]))
    assert packed == want
    assert zlib.decompress(packed, -15).decode("utf-8") == text


def test_small_data_is_embedded_as_json(monkeypatch):
    payload = _payload(10)
    out = html_module._embed(html_module._json_pieces(payload))
    assert out["encoding"] is None and str(out["json"]) == html_module.script_json(payload)
