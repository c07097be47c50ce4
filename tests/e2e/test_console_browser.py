"""Issue 35: the console in a real headless browser (Debian's ``chromium`` driven by
Selenium through ``chromedriver``), served by uvicorn over a real embedded fabric.

The walk: scopes → tenant → user → thread → a note → its predecessor along the lineage →
the log, where a row tampered in SQL is flagged while the others are shown; then a
forgotten note shows its tombstone and never its content. Skipped, saying why, only
where no browser binary is installed (``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.webdriver.common.by import By  # noqa: E402

from memfabric.adapters import open_fabric  # noqa: E402
from memfabric.adapters.console import ConsoleSettings, build_app  # noqa: E402
from memfabric.domain.note import note_uuid  # noqa: E402

SECRET = "The user's door code is 8675309 quokka"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser_paths() -> tuple[str, str] | None:
    """(browser, chromedriver) binaries, or ``None`` when either is missing."""
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(app: Any, port: int) -> tuple[Any, threading.Thread]:
    """uvicorn serving ``app`` on 127.0.0.1:``port`` in a thread, once it listens."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    return server, thread


def chrome(paths: tuple[str, str]) -> Any:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = paths[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)


@pytest.fixture
def browser() -> Iterator[Any]:
    paths = browser_paths()
    if paths is None:
        pytest.skip("no browser binary: install Debian's chromium and chromium-driver "
                    "(apt-get install -y chromium chromium-driver) to run the console's browser test")
    driver = chrome(paths)
    try:
        yield driver
    finally:
        driver.quit()


def test_walk_scope_note_lineage_log_in_a_real_browser(dsn: str, browser: Any, tmp_path: Path) -> None:
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "alice", "chat-1")
        old = notes.remember(kind="fact", content="Alice lives in Lisbon", subject="home")
        new = notes.remember(kind="fact", content="Alice lives in Porto", subject="home")
        bike = notes.remember(kind="fact", content="Alice rides a bike to work", tags=["commute"])
        gone = notes.remember(kind="fact", content=SECRET)
        notes.forget(id=gone.id)
        with psycopg.connect(dsn) as conn:  # tamper with the bike note's Remembered event
            bad = conn.execute("UPDATE memfabric_events SET state = set_byte(state, octet_length(state) - 1,"
                               " get_byte(state, octet_length(state) - 1) # 1) WHERE originator_id = %s"
                               " AND originator_version = 1 RETURNING notification_id",
                               (note_uuid(notes.scope, bike.id),)).fetchone()[0]  # type: ignore[index]
        port = free_port()
        server, thread = start_server(build_app(fabric, ConsoleSettings(port=port)), port)
        try:
            base = f"http://127.0.0.1:{port}"
            b = browser
            b.get(base + "/")
            b.save_screenshot(str(tmp_path / "scopes.png"))
            b.find_element(By.LINK_TEXT, "acme").click()
            b.find_element(By.LINK_TEXT, "alice").click()
            b.find_element(By.LINK_TEXT, "chat-1").click()
            assert "Notes of scope acme/alice/chat-1" in b.find_element(By.ID, "notes").text
            listed = b.find_element(By.ID, "listed").text
            assert "Alice lives in Porto" in listed and "door code" not in listed
            tomb = b.find_element(By.ID, "tombstones").text
            assert gone.id in tomb

            b.find_element(By.LINK_TEXT, new.id).click()  # scope → note
            assert b.find_element(By.ID, "note-content").text == "Alice lives in Porto"
            events = b.find_elements(By.CSS_SELECTOR, "#timeline li")
            assert [e.find_element(By.TAG_NAME, "strong").text for e in events] == [
                "Remembered", "Remembered", "Superseded"]
            assert "the newer value replaces it" in b.find_element(By.ID, "reason").text
            b.save_screenshot(str(tmp_path / "note.png"))
            b.find_element(By.CSS_SELECTOR, f"#chain a[href^='/notes/{old.id}']").click()  # along the lineage
            assert b.find_element(By.ID, "state").text == "superseded"

            b.find_element(By.ID, "log-link").click()  # note → log
            rows = b.find_elements(By.CSS_SELECTOR, "#log tbody tr")
            assert len(rows) >= 6  # every event is shown, the tampered one too
            flagged = b.find_elements(By.CSS_SELECTOR, "#log tr.tampered")
            assert [r.get_attribute("id") for r in flagged] == [f"row-{bad}"]
            assert "TAMPERED" in flagged[0].text
            assert all("ok" in r.text for r in rows if r.get_attribute("id") != f"row-{bad}")
            b.find_element(By.ID, "run-verify").click()
            assert "TAMPERED" in b.find_element(By.ID, "verify-result").text
            b.save_screenshot(str(tmp_path / "log.png"))

            b.get(f"{base}/notes/{gone.id}")  # a forgotten note: its tombstone only
            assert b.find_element(By.ID, "state").text == "forgotten"
            assert "content can no longer be read" in b.find_element(By.ID, "tombstone").text
            assert not b.find_elements(By.ID, "note-content")
            for path in ("/", "/?tenant=acme&resource=alice&thread=chat-1", f"/notes/{gone.id}", "/log"):
                b.get(base + path)
                assert "8675309" not in b.page_source and "door code" not in b.page_source

            b.get(base + "/projections")
            assert "recall_index" in b.find_element(By.ID, "projections").text
            assert all((tmp_path / f"{n}.png").stat().st_size > 10_000 for n in ("scopes", "note", "log"))
        finally:
            server.should_exit = True
            thread.join(timeout=10)
