"""Drive a job's Launchpad in headless Chromium (Debian's /usr/bin/chromium, through Playwright).

The steps and selectors follow /work/shared/reference/browser_test_recipe.md: the config goes into the
CodeMirror 5 editor with setValue (typing would be auto-indented into invalid YAML), the `Launch Run` button
is enabled once the config validates, and the tab then navigates to /runs/<run id>.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
from pathlib import Path

from tests.orchestration.dagster_server import wait_until_ended

CHROMIUM = Path("/usr/bin/chromium")
# Cheap protection on closed CI networks: no background fetches, no sandbox (CI runs as root),
# no /dev/shm reliance (the Debian wrapper fails to detect a small /dev/shm and never adds the flag itself).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
RUN_URL = re.compile(r".*/runs/([0-9a-f-]{36})$")
RUN_STATUS = "query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"
FINAL = {"SUCCESS", "FAILURE", "CANCELED"}
# How long an action or an expectation waits for the UI. Playwright's expect() waits 5 s by default: on a busy
# 2-core CI runner the Dagster UI once took longer than that to load an asset's partitions into its dialog.
UI_WAIT_MS = 60_000


def missing_browser() -> str | None:
    """Why the browser test cannot run here (no Debian chromium or no playwright), or None when it can."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found: apt-get install -y chromium chromium-driver"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed: pip install playwright (no `playwright install` needed)"
    return None


@contextlib.contextmanager
def browser_page(screenshot: Path):
    """A page of headless Chromium (1400x900) whose actions and expectations wait up to UI_WAIT_MS. When the
    block fails, the page is saved as `<screenshot stem>-failed.png` and the browser's console errors and failed
    requests are added to the error."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=UI_WAIT_MS)
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))
        page.set_default_timeout(UI_WAIT_MS)
        try:
            yield page
        except Exception as exc:
            page.screenshot(path=str(screenshot.with_name(screenshot.stem + "-failed.png")), full_page=True)
            exc.add_note(f"browser at {page.url}; " + ("\n".join(problems[-20:]) or "no console errors"))
            raise
        finally:
            browser.close()


def launch_from_launchpad(port: int, location: str, job: str, config_yaml: str, screenshot: Path) -> tuple[str, str]:
    """Open `job`'s Launchpad, set `config_yaml`, click Launch Run, wait until the run ends and its page shows
    the final status, save a full-page PNG to `screenshot`; return (run_id, status). When a step fails, the
    page is saved as `<screenshot stem>-failed.png` and the browser's console errors are added to the error."""
    from playwright.sync_api import expect

    with browser_page(screenshot) as page:
        page.goto(f"http://127.0.0.1:{port}/locations/{location}/jobs/{job}/playground")
        editor = page.locator(".CodeMirror").first
        editor.wait_for(state="visible")
        editor.evaluate("(el, v) => el.CodeMirror.setValue(v)", config_yaml)
        assert editor.evaluate("el => el.CodeMirror.getValue()") == config_yaml
        button = page.get_by_role("button", name="Launch Run")
        expect(button).to_be_enabled()  # enabled only once the config validates against the job's schema
        button.click()
        page.wait_for_url(RUN_URL)
        run_id = RUN_URL.match(page.url).group(1)
        status = wait_until_ended(port, RUN_STATUS, {"id": run_id}, "runOrError", lambda s: s in FINAL)["status"]
        # The run page updates over a websocket; wait until it shows the final status before the screenshot.
        expect(page.get_by_text(status.capitalize(), exact=True).first).to_be_visible()
        page.screenshot(path=str(screenshot), full_page=True)
        return run_id, status
