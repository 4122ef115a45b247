import pytest

from ragassay.corpus import Corpus, Document

DOCS = {
    "bread": "How to bake bread.\n\nMix flour, water, salt and yeast. Knead the dough for ten minutes. "
             "Let it rise for two hours.\n\nBake at 230 degrees for forty minutes.",
    "gpl": "Copyleft licenses.\n\nThe GNU General Public License requires that modified versions be "
           "distributed under the same license. This is called copyleft.\n\nSource code must be offered.",
    "mit": "Permissive licenses.\n\nThe MIT license permits reuse within proprietary software provided "
           "that the copyright notice is included. It has no copyleft clause.",
    "space": "Rockets and orbits.\n\nA rocket reaches orbit when its horizontal velocity is high enough. "
             "Orbital velocity near Earth is about eight kilometres per second.",
}


@pytest.fixture
def small_corpus() -> Corpus:
    return Corpus([Document.from_raw(k, v) for k, v in DOCS.items()])
