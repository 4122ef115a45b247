import textwrap

import pytest

from ragassay.corpus import load_corpus

DOCS = {
    "gpl": "GNU GENERAL PUBLIC LICENSE\n\n6. Conveying Non-Source Forms.\n\nYou may convey a covered work in"
           " object code form under the terms\nof sections 4 and 5, provided that you also convey the\n"
           "machine-readable Corresponding Source.\n\nNOTE: The end. NOTE: The end.\n",
    "mit": "Permission is hereby granted, free of charge, to any person obtaining a copy.\n",
}


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    for doc_id, text in DOCS.items():
        (root / f"{doc_id}.txt").write_text(text)
    return load_corpus(root)


@pytest.fixture
def write_yaml(tmp_path):
    def _write(body: str, name: str = "golden.yaml"):
        p = tmp_path / name
        p.write_text(textwrap.dedent(body).lstrip())
        return p

    return _write
