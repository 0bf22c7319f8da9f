"""The web page (GET /) and the JavaScript client (GET /client.js) in a real browser.

Headless Chromium from Debian (`chromium`, `chromium-driver`) driven by Selenium 4, against the
real server binary started on a free port. Run through scripts/browser-test.sh, or directly:

    STATE_SERVER_BIN=.build/debug/state-server python3 -m pytest Tests/browser

Screenshots and the server's log go to test-artifacts/ (gitignored).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
WAIT = 10  # seconds: the longest any explicit wait may take
LOGIN_CHECK_DELAY = "1"  # seconds, so the loading state is visible


# ---- fixtures -------------------------------------------------------------------------------


class ServerProcess:
    """The server binary, started with `arguments`; `base` is its URL once it printed its port."""

    def __init__(self, arguments: list[str], log_name: str, env: dict[str, str] | None = None):
        binary = Path(os.environ.get("STATE_SERVER_BIN") or REPO / ".build/debug/state-server")
        if not binary.is_absolute():
            binary = REPO / binary
        assert binary.exists(), f"build the server first: {binary} is missing"
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / log_name
        self.log = open(self.log_path, "wb")
        environment = dict(os.environ, STATE_SERVER_LOGIN_CHECK_DELAY=LOGIN_CHECK_DELAY, **(env or {}))
        self.process = subprocess.Popen(
            [str(binary), *arguments], stdout=subprocess.PIPE, stderr=self.log, env=environment, cwd=REPO
        )
        first_line: list[bytes] = []
        ready = threading.Event()

        def read_stdout():
            for index, line in enumerate(iter(self.process.stdout.readline, b"")):
                if index == 0:
                    first_line.append(line)
                    ready.set()
                self.log.write(line)  # keep draining so the server never blocks on a full pipe
            ready.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        try:
            assert ready.wait(WAIT), "the server printed nothing within 10 s"
            assert first_line, f"the server exited with status {self.process.poll()}; see {self.log_path}"
            line = first_line[0].decode().strip()
            assert line.startswith("listening on http://"), line
        except BaseException:
            self.stop()
            raise
        self.base = line.removeprefix("listening on ").rstrip("/")
        self.port = int(self.base.rsplit(":", 1)[1])

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after 10 s; returns the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            status = self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait()
        self.log.close()
        return status


@pytest.fixture(scope="module")
def server():
    """The server binary on port 0; yields (base URL, path of its stderr log)."""
    process = ServerProcess(["--port", "0"], "browser-test-server.log")
    try:
        yield process.base, process.log_path
    finally:
        process.stop()


@pytest.fixture
def browser():
    """A factory of headless Chromium drivers; every driver is quit at the end of the test."""
    drivers: list[webdriver.Chrome] = []

    def make(width: int = 1280, height: int = 900, phone: bool = False) -> webdriver.Chrome:
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--disable-gpu",
            f"--window-size={width},{height}",
        ):
            options.add_argument(argument)
        if phone:  # a phone's viewport (a desktop window cannot be narrower than 500 px)
            options.add_experimental_option(
                "mobileEmulation", {"deviceMetrics": {"width": width, "height": height, "pixelRatio": 2.0}}
            )
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        driver.set_script_timeout(WAIT + 5)
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.quit()


# ---- helpers --------------------------------------------------------------------------------


def api(base, method, path, token=None, body=None):
    """One JSON request to the server (with the bearer token when given); the decoded reply."""
    request = Request(base + path, method=method, data=json.dumps(body).encode() if body is not None else None)
    if token:
        request.add_header("Authorization", "Bearer " + token)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    with urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def wait(driver, condition, message):
    return WebDriverWait(driver, WAIT, poll_frequency=0.05).until(lambda d: condition(d), message)


def wait_ready(driver):
    """Waits until the page has rendered its first snapshot and its stream is live."""
    wait(
        driver,
        lambda d: d.execute_script(
            "return document.documentElement.dataset.ready === 'true'"
            " && document.getElementById('status').dataset.status === 'open'"
        ),
        "the page never rendered a snapshot from a live stream",
    )


def wait_loaded(driver):
    """Waits until the page has rendered (a session's snapshot, or the initial states without one)."""
    wait(
        driver,
        lambda d: d.execute_script("return document.documentElement.dataset.ready === 'true'"),
        "the page never rendered",
    )


def sessions_in_memory(base):
    """The server's `stateserver_sessions_in_memory` gauge, from GET /metrics."""
    with urlopen(base + "/metrics", timeout=WAIT) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("stateserver_sessions_in_memory "):
                return float(line.split()[1])
    raise AssertionError("GET /metrics has no stateserver_sessions_in_memory")


def text(driver, element_id):
    return driver.find_element(By.ID, element_id).text


def todo_titles(driver):
    return [label.text for label in driver.find_elements(By.CSS_SELECTOR, "#todo-list li label")]


def body_style(driver, prop):
    return driver.execute_script(f"return getComputedStyle(document.body).{prop}")


def list_style(driver, prop):
    return driver.execute_script(f"return getComputedStyle(document.getElementById('todo-list')).{prop}")


CALM_BACKGROUND = "rgb(244, 244, 245)"  # the page's own background (#f4f4f5), whatever the settings
PAGE_TEXT = "rgb(17, 17, 17)"  # the page's own text colour (#111111)


def css_rgb(hex_colour):
    """"#RRGGBB" as the computed style writes it."""
    value = int(hex_colour[1:], 16)
    return f"rgb({value >> 16 & 255}, {value >> 8 & 255}, {value & 255})"


def tint(hex_colour, share=0.12):
    """The todo list's light tint of a background colour: `share` of it, the rest white (as the
    page computes it, rounding halves up)."""
    value = int(hex_colour[1:], 16)
    channels = [value >> 16 & 255, value >> 8 & 255, value & 255]
    r, g, b = (math.floor(255 - (255 - c) * share + 0.5) for c in channels)
    return f"rgb({r}, {g}, {b})"


def parse_rgb(css):
    return [int(part) for part in css[css.index("(") + 1 : css.index(")")].split(",")[:3]]


def contrast(a, b):
    """WCAG contrast ratio of two computed `rgb(...)` colours."""

    def luminance(css):
        def channel(c):
            c /= 255
            return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

        r, g, b = (channel(c) for c in parse_rgb(css))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def chip_style(driver, prop):
    return driver.execute_script(f"return getComputedStyle(document.getElementById('todo-colours')).{prop}")


def keep_toasts(driver, milliseconds=600_000):
    """Toasts of this page stay `milliseconds` (read when each is shown): long, for a test that
    looks at a toast later; short, for one that waits for it to go."""
    driver.execute_script("document.getElementById('toasts').dataset.dismissAfter = String(arguments[0])", milliseconds)


def toasts(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#toasts .toast")


def toasts_shown(driver):
    return int(driver.find_element(By.ID, "toasts").get_attribute("data-shown"))


def stream_caught_up(driver):
    """Makes one more change (the counter set to the value it shows, so nothing visible moves)
    through the page's own client, and waits until the page's stream has delivered it. Events
    arrive in order, so anything the stream would deliver before it (a repeated effect, say) has
    been handled by then: an absence can be asserted without sleeping."""
    version = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const value = Number(document.getElementById('count').textContent);
        window.stateApp.client.dispatch('counter', {type: 'set', value}).then((r) => done(r.version), () => done(-1));
        """
    )
    assert version > 0, "the marker change was refused"
    wait(
        driver,
        lambda d: d.execute_script(
            "const s = window.stateApp.subscription; return s && s.features.counter ? s.features.counter.version : 0"
        )
        >= version,
        "the page's stream never delivered the marker change",
    )


def submit_text(driver, input_id, value):
    field = driver.find_element(By.ID, input_id)
    field.clear()
    field.send_keys(value)
    field.submit()


def severe_console_errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver, name):
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), f"could not save {path}"
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(b"\x89PNG\r\n\x1a\n"), f"{path} is not a real PNG"
    return path


# ---- the page -------------------------------------------------------------------------------


def test_two_windows_share_one_session(server, browser):
    base, server_log = server
    a = browser(1280, 900)
    b = browser(390, 844, phone=True)

    # Window A has no session until its first action, which creates one and puts it in the
    # fragment only.
    a.get(base + "/")
    wait_loaded(a)
    assert urlsplit(a.current_url).fragment == "" and text(a, "status") == "Not saved yet"
    submit_text(a, "todo-title", "Buy milk")
    wait(a, lambda d: "session=" in urlsplit(d.current_url).fragment, "no session in the URL fragment")
    wait_ready(a)
    url = a.current_url
    parts = urlsplit(url)
    assert parts.path == "/" and parts.query == "", url
    assert "token=" in parts.fragment
    token = dict(p.split("=", 1) for p in parts.fragment.split("&"))["token"]
    assert a.find_element(By.ID, "share-link").get_attribute("value") == url

    # Window B joins the same session from the shared URL.
    b.get(url)
    wait_ready(b)
    assert b.current_url == url
    assert text(b, "count") == "0"

    # Todos and the counter: actions in A show up in B.
    submit_text(a, "todo-title", "Walk the dog")
    wait(b, lambda d: todo_titles(d) == ["Buy milk", "Walk the dog"], "B never showed A's todos")
    a.find_element(By.ID, "increment").click()
    wait(b, lambda d: text(d, "count") == "1", "B never showed A's increment")

    # Toggle in B, clear completed in A.
    b.find_element(By.CSS_SELECTOR, "#todo-list li:first-child input[type=checkbox]").click()
    wait(
        a,
        lambda d: "done" in d.find_element(By.CSS_SELECTOR, "#todo-list li:first-child").get_attribute("class"),
        "A never showed B's toggle",
    )
    a.find_element(By.ID, "todo-clear").click()
    wait(b, lambda d: todo_titles(d) == ["Walk the dog"], "B never showed A's clear completed")
    assert text(b, "todo-summary") == "1 of 1 left"

    # Counter set in B shows in A; then back to 1.
    submit_text(b, "counter-value", "41")
    wait(a, lambda d: text(d, "count") == "41", "A never showed B's set")
    b.find_element(By.ID, "decrement").click()
    wait(a, lambda d: text(d, "count") == "40", "A never showed B's decrement")

    # Settings colour the todo list (and only the list), calmly: the swatch shows the colours as
    # set, the list a light tint of the background colour with a stripe of it, in a text colour
    # that reads on the tint. The seed settings first (#FFFFFF on #FF0000: the page's text on a
    # light red); then B changes the background, A's list follows; A's picker changes the text
    # colour, to a light one (the list keeps the page's text) and then a dark one (the list uses it).
    for driver in (a, b):
        assert chip_style(driver, "backgroundColor") == "rgb(255, 0, 0)"
        assert chip_style(driver, "color") == "rgb(255, 255, 255)"
        assert list_style(driver, "backgroundColor") == tint("#FF0000") == "rgb(255, 224, 224)"
        assert list_style(driver, "borderLeftColor") == "rgb(255, 0, 0)"
        assert list_style(driver, "color") == PAGE_TEXT
        assert body_style(driver, "backgroundColor") == CALM_BACKGROUND
    submit_text(b, "bg-hex", "#1e3a8a")
    # (The list's colours change with a short transition: wait for where they end.)
    for driver, name in ((a, "A"), (b, "B")):
        wait(driver, lambda d: list_style(d, "backgroundColor") == tint("#1E3A8A"), f"{name}'s todo list never changed colour")
        wait(driver, lambda d: list_style(d, "borderLeftColor") == "rgb(30, 58, 138)", f"{name}'s stripe never changed colour")
        assert chip_style(driver, "backgroundColor") == "rgb(30, 58, 138)"
    assert body_style(a, "backgroundColor") == CALM_BACKGROUND and body_style(b, "backgroundColor") == CALM_BACKGROUND
    assert a.find_element(By.ID, "bg-hex").get_attribute("value") == "#1E3A8A"
    for colour, on_list in (("#fde68a", PAGE_TEXT), ("#7c2d12", "rgb(124, 45, 18)")):
        a.execute_script(
            "const input = document.getElementById('fg-color');"
            "input.value = arguments[0]; input.dispatchEvent(new Event('change', {bubbles: true}));",
            colour,
        )
        wait(b, lambda d, c=colour: chip_style(d, "color") == css_rgb(c), f"B's swatch never showed the text colour {colour}")
        wait(b, lambda d, c=on_list: list_style(d, "color") == c, f"B's list text never became {on_list} for {colour}")
        assert contrast(list_style(b, "color"), list_style(b, "backgroundColor")) >= 4.5
    assert body_style(b, "color") == PAGE_TEXT

    # The toasts below stay until this test closes them (they go by themselves after a few
    # seconds otherwise, which test_toast_goes_away_by_itself_and_on_click checks).
    for driver in (a, b):
        keep_toasts(driver)

    # A wrong login in A: loading state in both windows, then the toast exactly once.
    a.find_element(By.ID, "login-username").send_keys("ada")
    a.find_element(By.ID, "login-password").send_keys("short")
    a.find_element(By.ID, "login-submit").click()
    wait(a, lambda d: d.find_element(By.ID, "login-loading").is_displayed(), "A never showed the loading state")
    wait(b, lambda d: d.find_element(By.ID, "login-loading").is_displayed(), "B never showed the loading state")
    wait(a, lambda d: len(toasts(d)) > 0, "A never showed the failure toast")
    assert len(toasts(a)) == 1 and toasts_shown(a) == 1
    assert "at least 8 characters" in toasts(a)[0].text
    wait(b, lambda d: toasts_shown(d) == 1, "B never showed the failure toast")
    assert "at least 8 characters" in text(a, "login-error")  # the state's error, shown inline

    # Screenshots of both windows while the toast is up.
    for driver in (a, b):
        driver.execute_script("window.scrollTo(0, 0)")
    shot_a = screenshot(a, "browser-window-a.png")
    shot_b = screenshot(b, "browser-window-b-phone.png")

    stream_caught_up(a)
    assert toasts_shown(a) == 1, "the toast was shown more than once"
    assert len(toasts(a)) == 1

    # Reconnect A's event stream: it starts from a snapshot, so no effect is delivered again.
    a.execute_script("window.stateApp.subscription.reconnect()")
    wait_ready(a)
    stream_caught_up(a)
    assert toasts_shown(a) == 1, "the toast came back after the stream reconnected"
    assert text(a, "count") == "40" and todo_titles(a) == ["Walk the dog"]

    # Reload page A: state from the snapshot, no toast at all.
    a.refresh()
    wait_ready(a)
    assert a.current_url == url
    assert text(a, "count") == "40" and todo_titles(a) == ["Walk the dog"]
    wait(a, lambda d: chip_style(d, "backgroundColor") == "rgb(30, 58, 138)", "A's todo list lost its colour")
    wait(a, lambda d: list_style(d, "backgroundColor") == tint("#1E3A8A"), "A's todo list lost its tint")
    stream_caught_up(a)
    assert toasts_shown(a) == 0 and toasts(a) == [], "the toast came back after a reload"

    # B closes its toast (it covers the bottom of a phone screen).
    assert len(toasts(b)) == 1
    b.find_element(By.CSS_SELECTOR, "#toasts .toast button").click()
    assert toasts(b) == [] and toasts_shown(b) == 1

    # A good login in B; A sees the logged-in view and logs out; B follows.
    b.find_element(By.ID, "login-username").clear()
    b.find_element(By.ID, "login-username").send_keys("grace")
    b.find_element(By.ID, "login-password").send_keys("correct horse")
    b.find_element(By.ID, "login-submit").click()
    wait(a, lambda d: d.find_element(By.ID, "login-done").is_displayed(), "A never showed the logged-in view")
    assert text(a, "login-user") == "grace"
    a.find_element(By.ID, "logout").click()
    wait(b, lambda d: d.find_element(By.ID, "login-form").is_displayed(), "B never showed the logout")
    assert toasts_shown(a) == 0

    # The phone window does not scroll sideways.
    assert b.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")

    # The fragment never reaches the server: no request carries it, only the event stream
    # carries the token (as access_token), and the server's log never shows it.
    for driver in (a, b):
        urls = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        for resource in urls:
            assert "#" not in resource and "session=" not in resource, resource
            if token in resource:
                assert urlsplit(resource).path.endswith("/events") and "access_token=" in resource, resource
        errors = severe_console_errors(driver)
        assert errors == [], f"the page logged errors (CSP violations?): {errors}"
    assert token not in server_log.read_text(errors="replace")

    assert shot_a.stat().st_size > 0 and shot_b.stat().st_size > 0


def test_rejected_actions_are_shown(server, browser):
    base, _ = server
    page = browser(800, 700)
    page.get(base + "/")
    wait_loaded(page)

    submit_text(page, "bg-hex", "#12345")
    wait(page, lambda d: d.find_element(By.ID, "error").is_displayed(), "no error shown for a bad colour")
    message = text(page, "error-text")
    assert "#RRGGBB" in message and "422 action_rejected" in message, message

    page.find_element(By.ID, "todo-title").send_keys("   ")
    page.find_element(By.CSS_SELECTOR, "#todo-form button[type=submit]").click()
    wait(page, lambda d: "title must not be empty" in text(d, "error-text"), "no error for an empty todo")
    screenshot(page, "browser-error.png")

    page.find_element(By.ID, "error-dismiss").click()
    assert not page.find_element(By.ID, "error").is_displayed()

    # "New session" leaves this session; the next action starts a fresh one.
    first = urlsplit(page.current_url).fragment
    assert "session=" in first
    page.find_element(By.ID, "new-session").click()
    wait(
        page,
        lambda d: urlsplit(d.current_url).fragment == "" and text(d, "status") == "Not saved yet",
        "New session never left the session",
    )
    wait_loaded(page)
    assert text(page, "todo-summary") == "Nothing to do."
    page.find_element(By.ID, "increment").click()
    wait(
        page,
        lambda d: "session=" in urlsplit(d.current_url).fragment and urlsplit(d.current_url).fragment != first,
        "the first action never opened another session",
    )
    wait(page, lambda d: text(d, "count") == "1", "the new session's counter never showed 1")


def test_toast_goes_away_by_itself_and_on_click(server, browser):
    """A toast (the failed login's) leaves after its lifetime with nothing done (shortened here
    through the page's data-dismiss-after), and at once when clicked anywhere."""
    base, _ = server
    page = browser(800, 700)
    page.get(base + "/")
    wait_loaded(page)
    assert page.find_element(By.ID, "toasts").get_attribute("data-dismiss-after") == "6000"

    def failed_login(shown):
        page.find_element(By.ID, "login-username").clear()
        page.find_element(By.ID, "login-username").send_keys("ada")
        page.find_element(By.ID, "login-password").send_keys("short")
        page.find_element(By.ID, "login-submit").click()
        wait(page, lambda d: toasts_shown(d) == shown, f"toast {shown} never showed")

    # By itself: a short lifetime, then the toast is gone without any input.
    keep_toasts(page, 300)
    failed_login(1)
    wait(page, lambda d: toasts(d) == [], "the toast never went away by itself")
    assert toasts_shown(page) == 1

    # On a click on its text (not only its Close button), however long it would stay.
    keep_toasts(page)
    failed_login(2)
    assert len(toasts(page)) == 1
    page.find_element(By.CSS_SELECTOR, "#toasts .toast p").click()
    wait(page, lambda d: toasts(d) == [], "a click on the toast did not dismiss it")
    assert toasts_shown(page) == 2
    assert severe_console_errors(page) == []


def test_unknown_session_in_the_url_is_reported(server, browser):
    base, _ = server
    page = browser(800, 700)
    page.get(base + "/#session=nope&token=nope")
    wait(page, lambda d: d.find_element(By.ID, "error").is_displayed(), "no error for an unknown session")
    assert "session_not_found" in text(page, "error-text")
    wait(page, lambda d: text(d, "status") == "Offline", "the status never said Offline")


# ---- the JavaScript client ------------------------------------------------------------------

CLIENT_HELPERS = """
const done = arguments[arguments.length - 1];
const until = async (test, ms = 8000) => {
  const end = Date.now() + ms;
  while (!test()) {
    if (Date.now() > end) throw new Error('timed out waiting for ' + test);
    await new Promise((r) => setTimeout(r, 20));
  }
};
"""


def run_client_script(driver, body):
    result = driver.execute_async_script(
        CLIENT_HELPERS + "(async () => {" + body + "})().then(done, (e) => done({error: String(e && e.stack || e)}));"
    )
    assert not (isinstance(result, dict) and "error" in result), result.get("error")
    return result


def test_client_fetch_transport_resumes_with_last_event_id(server, browser):
    base, _ = server
    page = browser(800, 600)
    page.get(base + "/")
    wait_loaded(page)
    result = run_client_script(
        page,
        """
        const c = await StateClient.createSession();
        const seqs = [], effects = [];
        let snapshots = 0;
        const sub = c.subscribe({
          transport: 'fetch',
          onSnapshot() { snapshots++; },
          onChange(change) { seqs.push(change.seq); },
          onEffect(effect) { effects.push(effect); },
        });
        await until(() => snapshots === 1 && sub.status === 'open');
        for (let i = 0; i < 3; i++) await c.dispatch('counter', {type: 'increment'});
        await until(() => seqs.length === 3);

        // Reconnect while dispatching: every change arrives exactly once, in order.
        sub.reconnect();
        const sent = [];
        for (let i = 0; i < 5; i++) sent.push((await c.dispatch('counter', {type: 'increment'})).version);
        await until(() => seqs.length === 8);

        // An effect survives a reconnect exactly once.
        await c.dispatch('login', {type: 'submit', username: 'ada', password: 'x'});
        await until(() => effects.length === 1);
        sub.reconnect();
        await until(() => sub.status === 'open');
        await c.dispatch('counter', {type: 'increment'});
        await until(() => seqs.length === 11);
        const lastBeforeClose = sub.lastEventId;
        sub.close();

        // A new subscription that starts after the first event gets the rest replayed, no snapshot.
        const replayed = [];
        let snapshots2 = 0;
        const sub2 = c.subscribe({
          transport: 'fetch', lastEventId: seqs[0],
          onSnapshot() { snapshots2++; },
          onChange(change) { replayed.push(change.seq); },
        });
        await until(() => replayed.length === seqs.length - 1);
        sub2.close();
        const state = await c.getState('counter');
        return {seqs, effects, snapshots, snapshots2, replayed, sent, lastBeforeClose, count: state.state.count};
        """,
    )
    seqs = result["seqs"]
    assert seqs == sorted(set(seqs)) and len(seqs) == 11, seqs
    assert seqs == list(range(seqs[0], seqs[0] + 11)), "a change was missed or repeated"
    assert result["snapshots"] == 1, "a resumed stream must not start from a snapshot"
    assert result["effects"] == [{"type": "toast", "message": "The password must have at least 8 characters."}]
    assert result["snapshots2"] == 0 and result["replayed"] == seqs[1:]
    assert result["lastBeforeClose"] == seqs[-1]
    assert result["count"] == 9


def test_client_fetch_transport_acts_on_the_shutdown_event(server, browser):
    """The fetch transport closes a stream as soon as it reads `event: shutdown` (even one the
    server has not ended yet) and reconnects with Last-Event-ID of the last change: the event has
    no id. It is neither a change nor an error. (`fetch` is scripted for the events URL.)"""
    base, _ = server
    page = browser(800, 600)
    page.get(base + "/")
    wait_loaded(page)
    result = run_client_script(
        page,
        """
        const snapshot = 'id: 4\\nevent: snapshot\\ndata: {"features":{"counter":{"version":3,"state":{"count":3}}}}\\n\\n';
        const change = (seq, version) => `id: ${seq}\\nevent: state\\ndata: {"feature":"counter","version":${version},`
          + `"cause":"dispatch","action":{"type":"increment"},"state":{"count":${version}},"effect":null}\\n\\n`;
        const farewell = 'retry: 50\\nevent: shutdown\\ndata: {"reason":"shutdown","retryAfterMs":50}\\n\\n';
        const requests = [];
        const realFetch = window.fetch;
        window.fetch = async (url, init) => {
          if (!String(url).includes('/events')) return realFetch(url, init);
          requests.push(init.headers['Last-Event-ID'] ?? null);
          const text = requests.length === 1 ? snapshot + change(5, 4) + farewell : change(6, 5);
          // Neither stream ends: the client must act on the event itself.
          const body = new ReadableStream({start(c) { c.enqueue(new TextEncoder().encode(text)); }});
          return new Response(body, {status: 200, headers: {'Content-Type': 'text/event-stream'}});
        };
        try {
          const seen = {snapshots: 0, seqs: [], statuses: [], errors: []};
          const sub = new StateClient({sessionId: 's', token: 't'}).subscribe({
            transport: 'fetch',
            onSnapshot(features, seq) { seen.snapshots++; seen.seqs.push(seq); },
            onChange(change) { seen.seqs.push(change.seq); },
            onStatus(status) { seen.statuses.push(status); },
            onError(error) { seen.errors.push(error.code); },
          });
          await until(() => seen.seqs.length === 3);
          sub.close();
          return Object.assign(seen, {requests, lastEventId: sub.lastEventId});
        } finally {
          window.fetch = realFetch;
        }
        """,
    )
    assert result["requests"] == [None, "5"], result
    assert result["snapshots"] == 1 and result["seqs"] == [4, 5, 6], result
    assert result["errors"] == [], result
    assert result["statuses"] == ["open", "reconnecting", "open", "closed"], result
    assert result["lastEventId"] == 6


def test_client_reports_a_deleted_session_as_fatal(server, browser):
    base, _ = server
    page = browser(800, 600)
    page.get(base + "/")
    wait_loaded(page)
    result = run_client_script(
        page,
        """
        const out = {};
        for (const transport of ['eventsource', 'fetch']) {
          const c = await StateClient.createSession();
          const errors = [];
          let snapshots = 0;
          const sub = c.subscribe({transport, onSnapshot() { snapshots++; }, onError(e) { errors.push(e); }});
          await until(() => snapshots === 1);
          await c.deleteSession();
          await until(() => errors.length > 0, 9000);
          out[transport] = {code: errors[0].code, fatal: errors[0].fatal, status: sub.status};
        }
        let rejected;
        try {
          await new StateClient({sessionId: 'x', token: 'y'}).dispatch('counter', {type: 'increment'});
        } catch (e) { rejected = {status: e.status, code: e.code, name: e.name}; }
        out.rejected = rejected;
        return out;
        """,
    )
    for transport in ("eventsource", "fetch"):
        assert result[transport] == {"code": "session_not_found", "fatal": True, "status": "closed"}, result
    assert result["rejected"] == {"status": 404, "code": "session_not_found", "name": "StateClientError"}


def test_client_dispatch_options_and_state(server, browser):
    base, _ = server
    page = browser(800, 600)
    page.get(base + "/")
    wait_loaded(page)
    result = run_client_script(
        page,
        """
        const c = await StateClient.createSession();
        const first = await c.dispatch('counter', {type: 'increment', by: 5}, {ifMatch: 0});
        let conflict;
        try { await c.dispatch('counter', {type: 'increment'}, {ifMatch: 0}); }
        catch (e) { conflict = {status: e.status, code: e.code}; }
        const key = StateClient.randomKey();
        const once = await c.dispatch('counter', {type: 'increment'}, {idempotencyKey: key});
        const again = await c.dispatch('counter', {type: 'increment'}, {idempotencyKey: key});
        let invalid;
        try { await c.dispatch('counter', {type: 'set'}); }
        catch (e) { invalid = {status: e.status, code: e.code, message: e.message}; }
        const one = await c.getState('counter');
        const all = await c.getState();
        const features = (await StateClient.features()).map((f) => f.name);
        return {first: first.version, conflict, once: [once.version, once.replayed], again: [again.version, again.replayed],
                invalid, one, allNames: Object.keys(all.features), features};
        """,
    )
    assert result["first"] == 1
    assert result["conflict"] == {"status": 412, "code": "version_conflict"}
    assert result["once"] == [2, False] and result["again"] == [2, True]
    assert result["invalid"]["status"] == 422 and result["invalid"]["code"] == "invalid_action"
    assert "value" in result["invalid"]["message"]
    assert result["one"] == {"feature": "counter", "version": 2, "state": {"count": 6}}
    assert sorted(result["allNames"]) == sorted(result["features"]) == ["counter", "login", "settings", "todos"]


def test_loading_the_page_creates_no_session(server, browser):
    """Reloads and crawlers leave no sessions behind; the first action creates one, and this
    browser reopens it (localStorage) on the next visit without a fragment."""
    base, _ = server
    page = browser(800, 700)
    before = sessions_in_memory(base)
    for _ in range(2):
        page.get(base + "/")
        wait_loaded(page)
        assert text(page, "status") == "Not saved yet" and text(page, "count") == "0"
    assert urlsplit(page.current_url).fragment == ""
    assert sessions_in_memory(base) == before, "loading the page created a session"

    page.find_element(By.ID, "increment").click()
    wait(page, lambda d: "session=" in urlsplit(d.current_url).fragment, "the first action created no session")
    wait_ready(page)
    wait(page, lambda d: text(d, "count") == "1", "the counter never showed 1")
    fragment = urlsplit(page.current_url).fragment
    assert sessions_in_memory(base) == before + 1

    # A visit without the fragment reopens the same session: no new one.
    page.get(base + "/")
    wait_ready(page)
    assert urlsplit(page.current_url).fragment == fragment
    assert text(page, "count") == "1"
    assert sessions_in_memory(base) == before + 1

    # A remembered session that is gone (deleted) is forgotten: back to no session, none created.
    token = dict(p.split("=", 1) for p in fragment.split("&"))["token"]
    session = dict(p.split("=", 1) for p in fragment.split("&"))["session"]
    page.execute_script(
        "return fetch('/v1/sessions/' + arguments[0], {method: 'DELETE', headers: {Authorization: 'Bearer ' + arguments[1]}})"
        ".then((r) => r.status)",
        session, token,
    )
    wait(page, lambda d: sessions_in_memory(base) == before, "the session was not deleted")
    page.get(base + "/")
    wait(page, lambda d: text(d, "status") == "Not saved yet", "a deleted remembered session was not forgotten")
    assert urlsplit(page.current_url).fragment == ""
    assert not page.find_element(By.ID, "error").is_displayed()
    assert sessions_in_memory(base) == before


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_default_look(server, browser, size):
    """The seed settings colour the todo list only; the page is calm and fits a phone. The
    screenshots (test-artifacts/browser-default-*.png) are for a person to look at."""
    base, _ = server
    page = browser(1280, 900) if size == "desktop" else browser(390, 844, phone=True)
    page.get(base + "/")
    wait_loaded(page)
    for title in ("Buy milk", "Walk the dog"):
        submit_text(page, "todo-title", title)
        wait(page, lambda d, t=title: t in todo_titles(d), f"{title!r} never appeared")
    wait_ready(page)
    # The seed's #FF0000 is only a swatch and a stripe: the list is a light tint, its text reads.
    assert chip_style(page, "backgroundColor") == "rgb(255, 0, 0)"
    wait(page, lambda d: list_style(d, "backgroundColor") == tint("#FF0000"), "the todo list never took its tint")
    assert min(parse_rgb(list_style(page, "backgroundColor"))) >= 200, "the todo list is not a light tint"
    assert contrast(list_style(page, "color"), list_style(page, "backgroundColor")) >= 4.5
    assert body_style(page, "backgroundColor") == CALM_BACKGROUND
    assert body_style(page, "color") == PAGE_TEXT
    # Nothing larger than the swatch is a loud red (the stripe is 4 px wide).
    loud = page.execute_script(
        """
        return [...document.querySelectorAll('body *')].filter((element) => {
            const style = getComputedStyle(element);
            const box = element.getBoundingClientRect();
            return style.backgroundColor === 'rgb(255, 0, 0)' && box.width * box.height > 48 * 32;
        }).map((element) => element.id || element.tagName);
        """
    )
    assert loud == [], f"loud red areas: {loud}"
    assert page.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    page.execute_script("window.scrollTo(0, 0)")
    screenshot(page, f"browser-default-{size}.png")


def test_streams_resume_after_the_server_restarts(browser, tmp_path):
    """SIGTERM ends every stream with `event: shutdown` and a `retry:` delay; the page (its
    EventSource) and both transports of the client reconnect after it, to the server started
    again on the same port and database, and resume with Last-Event-ID: no new snapshot, no
    change missed or repeated, no error."""
    arguments = ["--storage", f"sqlite:{tmp_path}/state.db"]
    env = {"STATE_SERVER_STREAMS_SHUTDOWN_RETRY": "0.3"}
    first = ServerProcess(["--port", "0", *arguments], "browser-test-restart-1.log", env)
    servers = [first]
    try:
        page = browser(800, 700)
        page.get(first.base + "/")
        wait_loaded(page)
        page.find_element(By.ID, "increment").click()
        wait(page, lambda d: "session=" in urlsplit(d.current_url).fragment, "the first action created no session")
        wait_ready(page)
        wait(page, lambda d: text(d, "count") == "1", "the counter never showed 1")
        # Two more subscriptions of the same session, one per transport, record what they see.
        run_client_script(
            page,
            """
            const fragment = new URLSearchParams(window.location.hash.slice(1));
            const c = new StateClient({sessionId: fragment.get('session'), token: fragment.get('token')});
            window.seen = {};
            for (const transport of ['eventsource', 'fetch']) {
              const seen = window.seen[transport] = {snapshots: 0, seqs: [], statuses: [], errors: []};
              c.subscribe({
                transport, features: ['counter'],
                onSnapshot(features, seq) { seen.snapshots++; seen.seqs.push(seq); },
                onChange(change) { seen.seqs.push(change.seq); },
                onStatus(status) { seen.statuses.push(status); },
                onError(error) { seen.errors.push(error.code); },
              });
            }
            await until(() => Object.values(window.seen).every((s) => s.statuses.at(-1) === 'open'));
            await c.dispatch('counter', {type: 'increment'});
            await until(() => Object.values(window.seen).every((s) => s.seqs.length === 2));
            return true;
            """,
        )
        wait(page, lambda d: text(d, "count") == "2", "the page never showed 2")

        assert first.stop() == 0, f"the server did not exit cleanly; see {first.log_path}"
        second = None
        deadline = time.monotonic() + WAIT
        while second is None:  # the port may take a moment to be free again
            try:
                second = ServerProcess(["--port", str(first.port), *arguments], "browser-test-restart-2.log", env)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        servers.append(second)

        # A change made on the new server reaches every subscription once, after the reconnection.
        wait(page, lambda d: text(d, "status") == "Live", "the page never reconnected")
        page.find_element(By.ID, "increment").click()
        wait(page, lambda d: text(d, "count") == "3", "the page never showed the change made after the restart")
        seen = WebDriverWait(page, WAIT, poll_frequency=0.05).until(
            lambda d: d.execute_script(
                "return Object.values(window.seen).every((s) => s.seqs.length === 3) ? window.seen : null"
            ),
            "a subscription never got the change made after the restart",
        )
        for transport, record in seen.items():
            assert record["snapshots"] == 1, (transport, record)
            first_seq = record["seqs"][0]
            assert record["seqs"] == [first_seq, first_seq + 1, first_seq + 2], (transport, record)
            assert record["errors"] == [], (transport, record)
            assert "reconnecting" in record["statuses"] and record["statuses"][-1] == "open", (transport, record)
        assert not page.find_element(By.ID, "error").is_displayed()
    finally:
        for process in servers:
            process.stop()
