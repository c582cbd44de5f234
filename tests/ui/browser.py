"""Headless Chromium (Debian's ``chromium`` package) driven over the Chrome DevTools protocol.

The protocol is JSON over one WebSocket, which aiohttp (already a dependency) speaks, so the page
tests need no browser-automation package and never download a browser: ``launch`` starts the
system Chromium with a fresh profile and ``--remote-debugging-port=0``, reads the port Chromium
chose from ``DevToolsActivePort`` in that profile, and opens one tab. ``Page`` navigates, runs
JavaScript in the page, types, and takes full-page screenshots; every uncaught exception,
console error and browser-logged error (a Content-Security-Policy violation, a failed load) is
kept in ``Page.errors`` so a test can require a clean page.

Chromium: ``TOPOS_CHROMIUM`` or ``chromium`` on PATH (``apt-get install chromium``, as ``.ci/run``
does). :func:`chromium_or_skip` skips without one, or fails under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.ci import skip_or_fail

FLAGS = (
    "--headless",
    "--no-sandbox",  # the tests run as root here
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)
START_TIMEOUT_S = 30.0


def chromium_or_skip() -> str:
    """The Chromium binary; skips (fails under ``CI=true``) when there is none."""
    found = os.environ.get("TOPOS_CHROMIUM") or shutil.which("chromium")
    if not found:
        skip_or_fail("no chromium binary (apt-get install chromium, or set TOPOS_CHROMIUM)")
    return found


class CdpError(RuntimeError):
    pass


class _Connection:
    """One DevTools WebSocket: numbered calls and their answers, events to listeners."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            call = self._calls.pop(data.get("id", -1), None)
            if call is not None and not call.done():
                call.set_result(data)
            elif "method" in data:
                self.events.append(data)
        for call in self._calls.values():
            if not call.done():
                call.set_exception(CdpError("the browser closed the DevTools connection"))

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        number = next(self._ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        answer = asyncio.get_running_loop().create_future()
        self._calls[number] = answer
        await self.ws.send_str(json.dumps(message))
        async with asyncio.timeout(60):
            data = await answer
        if "error" in data:
            raise CdpError(f"{method}: {data['error'].get('message')}")
        result: dict[str, Any] = data.get("result", {})
        return result

    async def close(self) -> None:
        await self.ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class Page:
    """One tab."""

    def __init__(self, connection: _Connection, session: str, width: int, height: int) -> None:
        self._cdp = connection
        self._session = session
        self.width = width
        self.height = height

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._cdp.call(method, params, session=self._session)

    @property
    def errors(self) -> list[str]:
        """Uncaught exceptions, console errors and errors the browser logged, in order."""
        out: list[str] = []
        for event in self._cdp.events:
            if event.get("sessionId") != self._session:
                continue
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                out.append(details.get("exception", {}).get("description") or details["text"])
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                args = params["args"]
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in args))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                entry = params["entry"]
                out.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
        return out

    async def goto(self, url: str, *, timeout_s: float = 30.0) -> None:
        """Load ``url`` and wait for its load event (scripts run, styles applied)."""
        seen = len(self._cdp.events)
        result = await self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CdpError(f"cannot load {url}: {result['errorText']}")
        deadline = time.monotonic() + timeout_s
        while not any(
            e["method"] == "Page.loadEventFired" and e.get("sessionId") == self._session
            for e in self._cdp.events[seen:]
        ):
            if time.monotonic() > deadline:
                raise CdpError(f"{url} did not finish loading in {timeout_s:.0f}s")
            await asyncio.sleep(0.05)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = await self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, *, what: str, timeout_s: float = 30.0) -> Any:
        """Evaluate until the value is truthy (an exception counts as not yet); returns it."""
        deadline = time.monotonic() + timeout_s
        value: Any = None
        while time.monotonic() < deadline:
            try:
                value = await self.evaluate(expression)
            except CdpError as exc:
                value = exc
            if value and not isinstance(value, CdpError):
                return value
            await asyncio.sleep(0.1)
        text = await self.evaluate("document.body ? document.body.innerText : ''")
        raise AssertionError(
            f"timed out after {timeout_s:.0f}s waiting for {what}; last value {value!r}; "
            f"errors {self.errors}; page text:\n{str(text)[:3000]}"
        )

    async def type_into(self, selector: str, text: str) -> None:
        """Focus the element and type ``text`` as a keyboard would insert it."""
        focused = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return false; e.focus(); return true; })()"
        )
        if not focused:
            raise CdpError(f"no element {selector!r} to type into")
        await self.call("Input.insertText", {"text": text})

    async def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element."""
        box = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; e.scrollIntoView({block: 'center'});"
            " const r = e.getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
        )
        if box is None:
            raise CdpError(f"no element {selector!r} to click")
        for kind in ("mousePressed", "mouseReleased"):
            await self.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1},
            )

    async def screenshot(self, path: Path) -> Path:
        """The whole page (not only the window) as a PNG."""
        metrics = await self.call("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = await self.call(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
        )
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))
        return path


@contextlib.asynccontextmanager
async def launch(profile: Path, *, width: int = 1600, height: int = 1000) -> AsyncIterator[Page]:
    """Chromium with a fresh profile in ``profile`` (a new folder); yields its one tab."""
    binary = chromium_or_skip()
    await asyncio.to_thread(profile.mkdir, parents=True)
    log_path = profile.parent / f"{profile.name}.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if process.returncode is not None or time.monotonic() > deadline:
                raise CdpError(
                    f"chromium did not start (exit {process.returncode}); its log:\n"
                    + log_path.read_text(errors="replace")[-3000:]
                )
            await asyncio.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)
            cdp = _Connection(ws)
            try:
                target = await cdp.call("Target.createTarget", {"url": "about:blank"})
                attached = await cdp.call(
                    "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
                )
                page = Page(cdp, attached["sessionId"], width, height)
                for domain in ("Page", "Runtime", "Log"):
                    await page.call(f"{domain}.enable")
                await page.call(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                )
                yield page
            finally:
                with contextlib.suppress(CdpError, aiohttp.ClientError, TimeoutError):
                    await cdp.call("Browser.close")
                await cdp.close()
    finally:
        if process.returncode is None:
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
