"""The order the workers take the suite's modules in (conftest.longest_first): by the seconds
each took in a whole run, the longest first, a module not timed yet as the median one, each
module whole and in its own order."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from conftest import MODULE_SECONDS, longest_first


@dataclass
class Item:  # what longest_first reads of a pytest.Item
    path: Path
    name: str


def items(module: str, n: int) -> list[Item]:
    return [Item(Path("tests") / module, f"{module}::t{i}") for i in range(n)]


def test_the_longest_modules_go_first_and_an_untimed_one_counts_as_the_median():
    collected = [*items("a.py", 5), *items("b.py", 1), *items("new.py", 2), *items("c.py", 3)]
    seconds = {"a.py": 2.0, "b.py": 90.0, "c.py": 30.0, "gone.py": 10.0}  # median 10 < 30
    ordered = longest_first(collected, seconds)  # type: ignore[arg-type]
    modules = list(dict.fromkeys(i.path.name for i in ordered))
    assert modules == ["b.py", "c.py", "new.py", "a.py"]
    assert sorted(i.name for i in ordered) == sorted(i.name for i in collected)
    for module in modules:  # whole, in the collection's order
        assert [i for i in ordered if i.path.name == module] == [
            i for i in collected if i.path.name == module
        ]


def test_the_shipped_seconds_name_modules_of_the_suite():
    seconds = json.loads(MODULE_SECONDS.read_text())
    here = MODULE_SECONDS.parent
    assert seconds and all(v >= 0 for v in seconds.values())
    present = [name for name in seconds if (here / name).is_file()]
    assert len(present) >= 0.9 * len(seconds), sorted(set(seconds) - set(present))
