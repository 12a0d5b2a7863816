"""Fuzz `Pool.from_config` (python/exitpool/_config.py, the core's src/config_file.rs) with TOML text.

Two kinds of input: raw text (mutated from the seeds in fuzz/seeds/config/), and documents
built from the fuzzer's bytes out of the real keys, values of every TOML type, `[[exit]]`
tables with a planted password (see _plant.py) and proxy lists beside the file.

Properties: only `exitpool.InvalidInput` escapes (nothing else, not even another
`exitpool.Error`); an error names the key at the line where the document writes it; the planted
password never appears in an error message or in the built pool's exits as printed; every error
carries its file, and on valid TOML its `.loc` starts at a key of the document. Inputs are capped
(`-max_len`), so a hang is a finding too (`-timeout`).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["exitpool", "_plant", "tomllib"]):
    import tomllib
    from _plant import PLANT, CheckFailed, check_exit, check_no_plant, fragment, planted_proxy

    import exitpool
    from exitpool import InvalidInput, Pool

_TMP = tempfile.mkdtemp(prefix="exitpool-fuzz-config-")
_CONFIG = os.path.join(_TMP, "exitpool.toml")
_LISTS = {
    "proxies.txt": f"gw.example:8000:user-a:{PLANT}\nsess-b http://user-b:{PLANT}x@gw.example:8001 country=DE\n",
    "bad.txt": f"gw.example:8000\nsocks4://user:{PLANT}@gw.example:1\n",
    "dup.txt": "sess-b gw.example:1\nsess-b gw.example:2\n",
    "empty.txt": "# nothing\n",
}
for _name, _text in _LISTS.items():
    with open(os.path.join(_TMP, _name), "w", encoding="utf-8") as _f:
        _f.write(_text)
os.makedirs(os.path.join(_TMP, "a-directory"), exist_ok=True)

TOP_KEYS = [
    "strategy",
    "replicas",
    "session_ttl",
    "lease_ttl",
    "max_leases",
    "balance_factor",
    "warmup",
    "seed",
    "cooldown",
    "health",
    "calibrate",
    "exits_file",
    "exit",
]
RARE_KEYS = ["store", "namespace", "clock", "stratgy"]  # a store, or keys that are wrong
HEALTH_KEYS = [
    "consecutive",
    "degrade_at",
    "block_weight",
    "connect_weight",
    "window",
    "min_calls",
    "failure_rate",
    "captcha_rate",
    "captcha_consecutive",
    "recover_successes",
    "half_open_trials",
    "base_ejection",
    "max_ejection",
    "jitter",
    "min_hold",
    "forgive_after",
    "dead_after",
    "max_ejected",
    "min_in_service",
    "incident_fraction",
    "incident_min_exits",
    "incident_interval",
    "rate_limit_cooldown",
    "bogus",
]
WARMUP_KEYS = ["ramp", "initial_interval", "horizon", "steep"]
EXIT_KEYS = ["id", "proxy", "ip", "capacity", "tags", "port"]
STRATEGIES = ["round_robin", "weighted", "least_conn", "lru", "p2c", "fastest", ""]
# Paths the OS refuses in every way it can: a NUL (expanduser and open raise ValueError), a file
# used as a directory, a name too long, a user that does not exist.
EXITS_FILES = [
    *_LISTS,
    "missing.txt",
    "a-directory",
    "../" + os.path.basename(_TMP) + "/proxies.txt",
    "",
    "~\x00x",
    "proxies.txt\x00",
    "proxies.txt/x",
    "x" * 300,
    "~no-such-user-x/proxies.txt",
    "~",
]


def _toml_str(s: str) -> str:
    # JSON's escapes are TOML's, but for DEL, which TOML wants escaped too.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x) if ("." in repr(x) or "e" in repr(x)) else repr(x) + ".0"


# A valid value for each option, so that half the documents get past the first check.
VALID = {
    "strategy": ['"lru"', '"p2c"', '"round_robin"'],
    "replicas": ["1", "40"],
    "session_ttl": ["60", "0.5"],
    "lease_ttl": ["30"],
    "max_leases": ["1", "3"],
    "balance_factor": ["1.25"],
    "seed": ["0", "7"],
    "warmup": ["true", "false", "600", "{ ramp = 60, initial_interval = 5 }"],
    "cooldown": ["0", "2.5"],
    "calibrate": ["true", "false"],
    "exits_file": ['"proxies.txt"'],
    "health": ["{ consecutive = 3 }"],
    "consecutive": ["3", "7.5"],
    "degrade_at": ["1"],
    "window": ["20", "64"],
    "min_calls": ["5"],
    "failure_rate": ["0.5"],
    "max_ejected": ["0.3", "1.0"],
    "min_in_service": ["0", "2"],
    "jitter": ["0.0"],
    "base_ejection": ["10"],
    "max_ejection": ["600"],
    "dead_after": ["3"],
    "ramp": ["600"],
    "initial_interval": ["10"],
    "horizon": ["86400"],
    "capacity": ["0", "3"],
    "ip": ['"93.184.10.7"'],
    "id": ['"sess-1"', '"sess-2"'],
    "store": ['"memory://fuzz"', '"memory://"'],
    "namespace": ['"fleet-a"'],
}


def _value(fdp, key: str, planted: bool) -> str:
    if key in VALID and fdp.ConsumeBool():
        return fdp.PickValueInList(VALID[key])
    return _scalar(fdp, planted)


def _scalar(fdp, planted: bool) -> str:
    kind = fdp.ConsumeIntInRange(0, 8)
    if kind == 0:
        return str(fdp.ConsumeIntInRange(-3, 130))
    if kind == 1:
        return str(fdp.ConsumeIntInRange(-(2**63), 2**63 - 1))
    if kind == 2:
        return _toml_float(fdp.ConsumeRegularFloat() if fdp.ConsumeBool() else fdp.ConsumeFloat())
    if kind == 3:
        return fdp.PickValueInList(["true", "false"])
    if kind == 4:
        return _toml_str(fdp.PickValueInList(STRATEGIES))
    if kind == 5 and planted:
        return _toml_str(planted_proxy(fdp))  # a proxy URL pasted where it does not belong
    if kind == 6:
        return fdp.PickValueInList(["1979-05-27", "07:32:00", "1979-05-27T07:32:00Z"])
    if kind == 7:
        return "[" + ", ".join(str(fdp.ConsumeIntInRange(0, 9)) for _ in range(fdp.ConsumeIntInRange(0, 3))) + "]"
    return _toml_str(fragment(fdp, 12))


class _Doc:
    """A TOML document written line by line, remembering the line of every key it writes."""

    def __init__(self) -> None:
        self.lines: list = []
        self.where: dict = {}
        self.proxies: list = []

    def put(self, key: str, line: str) -> None:
        self.lines.append(line)
        self.where.setdefault(key, len(self.lines))


def _build(fdp) -> _Doc:
    doc = _Doc()
    seen = set()
    tables = []
    if fdp.ConsumeBool():
        doc.put("exits_file", 'exits_file = "proxies.txt"')
        seen.add("exits_file")
    for _ in range(fdp.ConsumeIntInRange(0, 8)):
        key = fdp.PickValueInList(RARE_KEYS) if fdp.ConsumeIntInRange(0, 7) == 0 else fdp.PickValueInList(TOP_KEYS)
        if key in seen:
            continue
        seen.add(key)
        if key in ("health", "warmup") and fdp.ConsumeBool():
            tables.append(key)
        elif key == "exit":
            tables.append(key)
        elif key == "exits_file" and fdp.ConsumeBool():
            doc.put(key, f"{key} = {_toml_str(fdp.PickValueInList(EXITS_FILES))}")
        elif key == "strategy" and fdp.ConsumeBool():
            doc.put(key, f"{key} = {_toml_str(fdp.PickValueInList(STRATEGIES))}")
        else:
            # A namespace is a label the pool shows as written: a URL there is not a password.
            doc.put(key, f"{key} = {_value(fdp, key, planted=key != 'namespace')}")
    for key in tables:
        if key == "exit":
            for i in range(fdp.ConsumeIntInRange(1, 3)):
                doc.put(f"exit[{i}]", "[[exit]]")
                fields = set()
                for _ in range(fdp.ConsumeIntInRange(0, 4)):
                    field = fdp.PickValueInList(EXIT_KEYS)
                    if field in fields:
                        continue
                    fields.add(field)
                    if field == "proxy" and fdp.ConsumeIntInRange(0, 3):
                        doc.proxies.append(planted_proxy(fdp))
                        value = _toml_str(doc.proxies[-1])
                    elif field == "tags" and fdp.ConsumeBool():
                        value = "{ country = " + _toml_str(fragment(fdp, 4)) + " }"
                    else:
                        value = _value(fdp, field, planted=False)
                    doc.put(f"exit[{i}].{field}", f"{field} = {value}")
        else:
            doc.put(key, f"[{key}]")
            names = HEALTH_KEYS if key == "health" else WARMUP_KEYS
            for name in {fdp.PickValueInList(names) for _ in range(fdp.ConsumeIntInRange(0, 5))}:
                doc.put(f"{key}.{name}", f"{name} = {_value(fdp, name, planted=False)}")
    return doc


def _load(text: bytes):
    with open(_CONFIG, "wb") as f:
        f.write(text)
    return Pool.from_config(_CONFIG)


def _check_pool(pool) -> None:
    check_no_plant("the pool's repr", repr(pool))
    for e in pool.exits:
        check_exit(e, planted=True)


def _structured(fdp) -> None:
    doc = _build(fdp)
    try:
        pool = _load(("\n".join(doc.lines) + "\n").encode("utf-8"))
    except InvalidInput as e:
        _check_location(e, None)
        message = str(e)
        check_no_plant("an error message", message)
        m = re.match(re.escape(_CONFIG) + r":(\d+): ([^:]+?): ", message)
        if m and m.group(2) in doc.where and int(m.group(1)) != doc.where[m.group(2)]:
            raise CheckFailed(
                f"key {m.group(2)} is on line {doc.where[m.group(2)]}, the error says: {message}\n" + "\n".join(doc.lines)
            ) from None
        return
    _check_pool(pool)


def _check_location(e: InvalidInput, doc) -> None:
    """The location as data: the file, a line with any key path, and a path that starts at a key
    the document has (a rule between two settings may name the one the file left out)."""
    if e.file != _CONFIG or (e.loc is not None and e.line is None):
        raise CheckFailed(f"located at file={e.file!r} loc={e.loc!r} line={e.line!r}: {e}")
    if doc is not None and e.loc is not None and not _resolves(doc, e.loc[:1]):
        raise CheckFailed(f"loc {e.loc!r} is not a key of the document: {e}")


def _resolves(doc, path) -> bool:
    node = doc
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return False
        elif not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _raw(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
        doc = tomllib.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        doc = None
    # Only inputs where the planted password is used as a URL password are checked for it:
    # raw mutation may just as well move it into a strategy name.
    occurrences = [m.start() for m in re.finditer(re.escape(PLANT), data.decode("utf-8", "replace"))]
    prefix = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'@/\\:]*:$")
    text = data.decode("utf-8", "replace")
    as_password = all(prefix.search(text[max(0, i - 64) : i]) for i in occurrences)
    try:
        pool = _load(data)
    except InvalidInput as e:
        _check_location(e, doc)
        if as_password:
            check_no_plant("an error message", str(e))
        return
    if as_password:
        _check_pool(pool)


def TestOneInput(data: bytes) -> None:
    if data[:1] == b"\x00":
        _structured(atheris.FuzzedDataProvider(data[1:]))
    else:
        _raw(data)


def main() -> None:
    assert exitpool.Pool is Pool
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
