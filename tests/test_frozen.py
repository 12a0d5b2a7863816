"""Every Python class of the extension is ``frozen``.

A ``frozen`` pyclass hands out only shared references, so its state lives behind the core's own
locks and no thread can ever meet PyO3's runtime borrow flag ("Already borrowed"). A class
without ``frozen`` would compile and pass single-threaded tests, and then fail under threads
(tests/test_concurrency.py) only when two calls happen to overlap. This guard reads the Rust
source, so a new class without ``frozen`` fails at once, whatever it does.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# `#[pyclass]`, `#[pyclass(...)]` or `#[pyo3::pyclass(...)]`; the arguments may span lines.
PYCLASS = re.compile(r"#\[\s*(?:pyo3\s*::\s*)?pyclass\b")
STRUCT = re.compile(r"\b(?:struct|enum)\s+(\w+)")


def _strip_comments(text: str) -> str:
    """Drops `//` and `/* */` comments, keeping string literals (a class name may be in one)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _args(text: str, start: int) -> str:
    """The text between the parentheses that open at ``start`` (balanced, strings skipped)."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    raise AssertionError(f"unbalanced #[pyclass( at offset {start}")


def _string_end(text: str, i: int) -> int:
    j = i + 1
    while text[j] != '"':
        j += 2 if text[j] == "\\" else 1
    return j


def pyclasses(source: str) -> list[tuple[str, bool]]:
    """(type name, declared frozen) for every pyclass attribute in one Rust file."""
    text = _strip_comments(source)
    found = []
    for m in PYCLASS.finditer(text):
        rest = m.end()
        while rest < len(text) and text[rest].isspace():
            rest += 1
        args = _args(text, rest) if text[rest] == "(" else ""
        # `frozen` as an argument of its own, not inside a string (e.g. a name) or a longer word.
        bare = re.sub(r'"(?:\\.|[^"\\])*"', '""', args)
        frozen = any(part.strip() == "frozen" for part in bare.split(","))
        item = STRUCT.search(text, m.end())
        found.append((item.group(1) if item else "?", frozen))
    return found


def test_the_checker_tells_frozen_from_not():
    """The parser itself: it must flag what the guard is for, however the attribute is written."""
    src = """
        #[pyclass(name = "A", module = "exitpool", frozen)]
        pub struct PyA { x: u32 }
        // #[pyclass(name = "Commented")] struct Gone;
        #[pyclass(
            name = "B",
            module = "exitpool",
        )]
        pub struct PyB { x: std::cell::Cell<u32> }
        #[pyclass]
        struct PyC;
        #[pyo3::pyclass(frozen, name = "D")]
        struct PyD;
        #[pyclass(name = "frozen")]
        struct PyE;
        #[pyclass(name = "F", unfrozen_like)]
        struct PyF;
    """
    assert pyclasses(src) == [("PyA", True), ("PyB", False), ("PyC", False), ("PyD", True), ("PyE", False), ("PyF", False)]


def test_every_pyclass_is_frozen():
    files = sorted(SRC.rglob("*.rs"))
    assert any(f.parent.name == "py" for f in files), f"no bindings found under {SRC}"
    classes = {f"{f.relative_to(SRC)}:{name}": frozen for f in files for name, frozen in pyclasses(f.read_text(encoding="utf-8"))}
    # The guard is not vacuous: the public classes are all seen.
    names = {k.split(":")[1] for k in classes}
    assert {"PyPool", "PyLease", "PyRing", "PyExit"} <= names, sorted(classes)
    unfrozen = sorted(k for k, frozen in classes.items() if not frozen)
    assert not unfrozen, (
        f"pyclasses without `frozen`: {unfrozen}. Declare them frozen and keep mutable state behind "
        "a lock, so that threads never hit PyO3's runtime borrow checking."
    )
