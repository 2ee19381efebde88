"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: the
browser reads NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4).

Why the protocol rather than `chromium --screenshot` / `--dump-dom` with `--enable-logging=stderr`:
that log prints every console message of a web page as INFO:CONSOLE whatever its level (Chromium
maps page messages to INFO), so console.error cannot be told from console.log, and failed loads
and uncaught exceptions are mixed with Chromium's own noise (D-Bus, GPU). Over the protocol, one
browser launch gives the console messages with their level (Runtime.consoleAPICalled), uncaught
exceptions (Runtime.exceptionThrown), browser-side errors such as a failed image load or a blocked
resource (Log.entryAdded), values read from the page after load (Runtime.evaluate) and the
screenshot (Page.captureScreenshot). No network and no extra packages: the pipe needs neither a
port nor a websocket client."""
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

# Flags: --no-sandbox because CI runs as root; --disable-dev-shm-usage because containers have a
# small /dev/shm; --hide-scrollbars so the screenshot holds the page only.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
         "--remote-debugging-pipe")


class BrowserError(RuntimeError):
    pass


def find_chromium(explicit=None):
    """The chromium binary: explicit (only it, when given), else $TRIPOD_CHROMIUM, else chromium or
    chromium-browser on PATH; None when there is none."""
    if explicit:
        return shutil.which(explicit)
    for candidate in (os.environ.get("TRIPOD_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def move_above_9(fd):
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Browser:
    """One headless Chromium; use as a context manager. call() sends a command and waits for its
    reply, keeping every event that arrives meanwhile in self.events."""

    def __init__(self, chromium, width, height, timeout):
        self.timeout = timeout
        self.events = []
        self.next_id = 0
        self.buffer = b""
        self.profile = tempfile.TemporaryDirectory(prefix="tripod-chromium-")
        self.stderr = tempfile.TemporaryFile()
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        # Move the browser's ends above 9 so that placing them on 3 and 4 cannot overwrite one another.
        to_browser_r, from_browser_w = (move_above_9(fd) for fd in (to_browser_r, from_browser_w))
        # bash (dash takes one-digit fds only) puts our pipe ends on fds 3 and 4 of the browser (Debian's
        # launcher script execs it, fds and all).
        script = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self.process = subprocess.Popen(
            ["/bin/bash", "-c", script, chromium, *FLAGS, f"--user-data-dir={self.profile.name}",
             f"--window-size={width},{height}", "about:blank"],
            pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL, stdout=self.stderr, stderr=self.stderr)
        os.close(to_browser_r)
        os.close(from_browser_w)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if self.process.poll() is None:
                self.send("Browser.close")
                self.process.wait(timeout=10)
        except (OSError, BrowserError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self.to_browser)
            os.close(self.from_browser)
            self.stderr.close()
            self.profile.cleanup()

    def log_tail(self, lines=15):
        self.stderr.seek(0)
        return "\n".join(self.stderr.read().decode(errors="replace").splitlines()[-lines:])

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        return self.next_id

    def read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no answer from chromium within {self.timeout} s\n{self.log_tail()}")
            ready, _, _ = select.select([self.from_browser], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError(f"chromium exited (status {self.process.wait()})\n{self.log_tail()}")
                self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None):
        wanted = self.send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self.read_message(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_for_event(self, method, timeout):
        deadline = time.monotonic() + timeout
        while not any(e["method"] == method for e in self.events):
            message = self.read_message(deadline)
            if "method" in message:
                self.events.append(message)

    def open_page(self, url, width, height):
        """A new tab at url with console, log and page events on; returns its session id once loaded."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=session)
        self.resize(session, width, height)
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_for_event("Page.loadEventFired", self.timeout)
        return session

    def resize(self, session, width, height):
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)

    def evaluate(self, session, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=session)
        if "exceptionDetails" in result:
            raise BrowserError(f"evaluating {expression!r}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, session):
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"}, session=session)["data"])

    def console_errors(self):
        """Error-level messages the page caused: console.error/assert, uncaught exceptions, and the
        browser's own error log entries (failed loads, blocked resources)."""
        errors = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                errors.append(f"console.{params['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                errors.append(f"uncaught: {details.get('exception', {}).get('description') or details.get('text')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                errors.append(f"{entry.get('source', 'log')}: {entry.get('text')} {entry.get('url', '')}".strip())
        return errors
