"""`exitpool report --live FILE`: re-renders as a running pool rewrites its snapshot."""

from __future__ import annotations

import json
import threading
import time

from exitpool import Exit, ManualClock, Pool
from exitpool._cli import main as cli


def write(pool, path):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pool.snapshot()))
    tmp.replace(path)


def test_live_report_follows_the_file(tmp_path, capsys):
    clock = ManualClock()
    pool = Pool([Exit(f"e{i}", f"http://u:pw@gw.example:{8000 + i}") for i in range(3)], strategy="round_robin", clock=clock)
    path = tmp_path / "snap.json"
    write(pool, path)

    def later():
        time.sleep(0.8)
        for _ in range(5):
            lease = pool.acquire(site="s.example")
            pool.release(lease, error="connect" if lease.exit_id == "e1" else None)
        for _ in range(5):
            lease = pool.acquire(site="s.example")
            pool.release(lease, **({"error": "connect"} if lease.exit_id == "e1" else {"status": 200}))
        write(pool, path)

    t = threading.Thread(target=later)
    t.start()
    assert cli(["report", str(path), "--live", "--for", "2.5", "--width", "120"]) == 0
    t.join()
    out = capsys.readouterr().out
    assert out.count("exitpool report") >= 2  # rendered once, then again after the change
    assert out.index("no bad exit") < out.index("bad exits: e1")
    assert cli(["report", "-", "--live"]) == 2
