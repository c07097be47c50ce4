"""Screenshots of every console page into ``docs/console/`` (PNG), from a small demo
fabric on a throwaway embedded PostgreSQL, in headless Chromium driven by Selenium.

Before the log page, one row of the log is tampered with in SQL so that it shows the
flag and a failed ``audit verify``. Needs Debian's ``chromium`` and ``chromium-driver``.

Run (from the repository root)::

    python scripts/console_screenshots.py            # writes docs/console/*.png
    python scripts/console_screenshots.py --out /tmp/shots
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import psycopg
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memfabric.adapters import open_fabric  # noqa: E402
from memfabric.adapters.console import ConsoleSettings, build_app  # noqa: E402
from memfabric.adapters.postgres.embedded import EmbeddedPostgres  # noqa: E402
from memfabric.domain.note import note_uuid  # noqa: E402
from tests.e2e.test_console_browser import browser_paths, chrome, free_port, start_server  # noqa: E402


def fill(fabric: object) -> dict[str, str]:
    """A few scopes with a supersession, a fold, links, a hold and a forget; returns ids."""
    alice = fabric.scope("acme", "alice", "chat-1")  # type: ignore[attr-defined]
    old = alice.remember(kind="fact", content="Alice lives in Lisbon", subject="home", tags=["profile"])
    new = alice.remember(kind="fact", content="Alice lives in Porto", subject="home", tags=["profile"])
    bike = alice.remember(kind="fact", content="Alice rides her bike to work", tags=["commute"])
    alice.remember(kind="fact", content="Alice rides her bike to work", tags=["habit"])
    alice.remember(kind="procedure", content="To book Alice's travel, check her calendar first",
                   tags=["travel"])
    alice.remember(kind="fact", content="Alice prefers window seats on trains", tags=["travel"])
    alice.link(bike.id, new.id, "related", 0.6)
    held = alice.remember(kind="fact", content="Alice's contract number is 41-7", tags=["legal"])
    alice.forget(id=held.id, hold=True, requested_by="legal-team")
    gone = alice.remember(kind="fact", content="Alice's door code is 8675309")
    alice.forget(id=gone.id, requested_by="alice")
    fabric.scope("acme", "alice", "chat-2").remember(kind="fact", content="Alice likes green tea")  # type: ignore[attr-defined]
    bob = fabric.scope("acme", "bob", "chat-1")  # type: ignore[attr-defined]
    for text in ("Bob works on the billing team", "Bob is vegetarian", "Bob's manager is Carol"):
        bob.remember(kind="fact", content=text)
    fabric.scope("globex").remember(kind="fact", content="Globex's fiscal year starts in April")  # type: ignore[attr-defined]
    fabric.scope("initech", "peter").remember(kind="fact", content="Peter dislikes Mondays")  # type: ignore[attr-defined]
    return {"old": old.id, "new": new.id, "bike": bike.id, "gone": gone.id, "held": held.id,
            "scope": "tenant=acme&resource=alice&thread=chat-1", "bike_aggregate": str(note_uuid(alice.scope, bike.id))}


def shoot(driver: object, url: str, path: Path) -> None:
    """Open ``url`` (``""``: stay on the page) and save a full-page screenshot to ``path``."""
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})  # type: ignore[attr-defined]
    if url:
        driver.get(url)  # type: ignore[attr-defined]
    height = driver.execute_script("return document.documentElement.scrollHeight")  # type: ignore[attr-defined]
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {  # type: ignore[attr-defined]
        "width": 1400, "height": max(600, min(int(height), 2400)), "deviceScaleFactor": 1, "mobile": False})
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    print("wrote", path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/console", help="directory of the PNG files")
    args = parser.parse_args()
    paths = browser_paths()
    if paths is None:
        sys.exit("no chromium/chromedriver: apt-get install -y chromium chromium-driver")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the server may run as another user when started as root
        server = EmbeddedPostgres(f"{tmp}/pg")
        try:
            with open_fabric(server.dsn) as fabric:
                ids = fill(fabric)
                port = free_port()
                web, thread = start_server(build_app(fabric, ConsoleSettings(port=port, read_only=False)), port)
                driver = chrome(paths)
                try:
                    base = f"http://127.0.0.1:{port}"
                    shoot(driver, base + "/", out / "scopes.png")
                    shoot(driver, base + "/?tenant=acme", out / "tenant.png")
                    shoot(driver, f"{base}/?{ids['scope']}", out / "scope.png")
                    shoot(driver, f"{base}/?{ids['scope']}&q=travel+window+seat", out / "search.png")
                    shoot(driver, f"{base}/notes/{ids['new']}?{ids['scope']}", out / "note.png")
                    shoot(driver, f"{base}/notes/{ids['gone']}?{ids['scope']}", out / "tombstone.png")
                    driver.get(base + "/projections")
                    driver.find_element(By.ID, "verify").click()  # the verify result on the page
                    shoot(driver, "", out / "projections.png")
                    with psycopg.connect(server.dsn) as conn:  # now tamper with one row for the log page
                        conn.execute("UPDATE memfabric_events SET state = set_byte(state, octet_length(state) - 1,"
                                     " get_byte(state, octet_length(state) - 1) # 1) WHERE originator_id = %s"
                                     " AND originator_version = 1", (ids["bike_aggregate"],))
                    shoot(driver, base + "/log?verify=1", out / "log.png")
                finally:
                    driver.quit()
                    web.should_exit = True
                    thread.join(timeout=10)
        finally:
            server.close()


if __name__ == "__main__":
    main()
