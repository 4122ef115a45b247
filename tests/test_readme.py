"""The README's claims that code can check: the quick start is the tested example, every command it shows
exists, and every page it links exists."""

import re
from pathlib import Path

from ragassay.cli.app import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_quick_start_block_is_the_tested_example():
    block = re.search(r"## Python quick start\n\n```python\n(.*?)```", README, re.S).group(1)
    example = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8").split("\n", 1)[1]
    assert block.strip() == example.strip()


def test_every_command_in_the_usage_block_exists():
    usage = re.search(r"## Using it\n\n```bash\n(.*?)```", README, re.S).group(1)
    used = {line.split()[1] for line in usage.splitlines() if line.startswith("ragassay ")}
    assert used and used <= set(COMMANDS), used - set(COMMANDS)


def test_every_linked_doc_exists():
    links = set(re.findall(r"\]\((docs/[^)]+\.md)\)", README))
    assert links and all((ROOT / link).is_file() for link in links)
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= links  # and every page is linked
