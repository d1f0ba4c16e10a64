#!/usr/bin/env python3
"""Renders an HTML or SVG file in headless Chromium and reports what the browser drew.

Usage: render_check.py CHROMIUM FILE SCREENSHOT.png

Drives Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no
network): loads file://FILE, collects every console message, uncaught exception and browser log
entry (failed loads, CSP and parser complaints), measures each <svg> of the page as laid out,
takes a full-page screenshot and decodes it (PNG, stdlib zlib) to count the pixels each picture
really coloured. Prints one JSON object on stdout; exits 0 when the page loaded, 1 otherwise.
The page itself needs no script: the measuring runs from here.
"""
import base64
import fcntl
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib


class Pipe:
    def __init__(self, wfd, rfd):
        self.w = os.fdopen(wfd, "wb", buffering=0)
        self.r = os.fdopen(rfd, "rb", buffering=0)
        self.buf = b""
        self.next_id = 0
        self.events = []

    def send(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.w.write(json.dumps(msg).encode() + b"\0")
        return self.next_id

    def read_one(self, deadline):
        while b"\0" not in self.buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from chromium")
            chunk = self.r.read(1 << 16)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method, params=None, session=None, timeout=60):
        want = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            m = self.read_one(deadline)
            if m.get("id") == want:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, name, timeout=60):
        deadline = time.monotonic() + timeout
        for m in self.events:
            if m.get("method") == name:
                return m
        while True:
            m = self.read_one(deadline)
            self.events.append(m)
            if m.get("method") == name:
                return m


def decode_png(data):
    """8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) -> (width, height, rows)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos = 8
    idat = b""
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6), "unexpected PNG format"
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * channels
    rows = []
    prev = bytearray(stride)
    i = 0
    for _ in range(height):
        ftype = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        if ftype == 1:
            for x in range(channels, stride):
                line[x] = (line[x] + line[x - channels]) & 0xFF
        elif ftype == 2:
            for x in range(stride):
                line[x] = (line[x] + prev[x]) & 0xFF
        elif ftype == 3:
            for x in range(stride):
                left = line[x - channels] if x >= channels else 0
                line[x] = (line[x] + ((left + prev[x]) >> 1)) & 0xFF
        elif ftype == 4:
            for x in range(stride):
                a = line[x - channels] if x >= channels else 0
                b = prev[x]
                c = prev[x - channels] if x >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


# Runs in the page after load: every svg's box and what it holds.
MEASURE = r"""
(() => {
  const out = [];
  for (const s of document.querySelectorAll('svg')) {
    if (s.parentElement && s.parentElement.closest('svg')) continue;
    const r = s.getBoundingClientRect();
    out.push({x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height,
              cells: s.querySelectorAll('rect[data-count]').length,
              lines: s.querySelectorAll('polyline').length,
              marks: s.querySelectorAll('rect.mark').length,
              gaps: s.querySelectorAll('rect.gap').length});
  }
  return JSON.stringify({svgs: out, title: document.title,
                         width: document.documentElement.scrollWidth,
                         height: document.documentElement.scrollHeight,
                         text: document.body ? document.body.innerText.length : 0});
})()
"""


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    chromium, page, shot = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    profile = tempfile.mkdtemp(prefix="rsched-chromium-")
    # Chromium reads commands on fd 3 and writes answers on fd 4: move the pipes' ends out of
    # the way (fd >= 10), then put the child's ends on 3 and 4 for Popen to pass on.
    ends = []
    for fd in os.pipe() + os.pipe():
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    cmd_r, cmd_w, ans_r, ans_w = ends
    os.dup2(cmd_r, 3)
    os.dup2(ans_w, 4)
    os.close(cmd_r)
    os.close(ans_w)
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--hide-scrollbars", "--mute-audio",
            "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, pass_fds=(3, 4))
    os.close(3)
    os.close(4)
    to_chrome_w, from_chrome_r = cmd_w, ans_r
    pipe = Pipe(to_chrome_w, from_chrome_r)
    report = {"console": [], "exceptions": [], "log": [], "loaded": False}
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            pipe.call(domain + ".enable", session=session)
        pipe.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1300, "height": 900, "deviceScaleFactor": 1, "mobile": False},
                  session=session)
        pipe.call("Page.navigate", {"url": "file://" + page}, session=session)
        pipe.wait_event("Page.loadEventFired", timeout=90)
        report["loaded"] = True
        m = pipe.call("Runtime.evaluate", {"expression": MEASURE, "returnByValue": True},
                      session=session)
        layout = json.loads(m["result"]["value"])
        report.update(layout)
        pipe.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1300, "height": max(900, min(int(layout["height"]), 16000)),
                   "deviceScaleFactor": 1, "mobile": False}, session=session)
        shot_b64 = pipe.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport":
                                                        True}, session=session, timeout=90)["data"]
        png = base64.b64decode(shot_b64)
        with open(shot, "wb") as f:
            f.write(png)
        # Let late console messages arrive, then collect every event.
        try:
            pipe.call("Runtime.evaluate", {"expression": "1"}, session=session, timeout=10)
        except Exception:
            pass
        for e in pipe.events:
            meth, p = e.get("method"), e.get("params", {})
            if meth == "Runtime.consoleAPICalled":
                report["console"].append(
                    {"type": p.get("type"),
                     "text": " ".join(str(a.get("value", a.get("description", "")))
                                      for a in p.get("args", []))})
            elif meth == "Runtime.exceptionThrown":
                report["exceptions"].append(p.get("exceptionDetails", {}).get("text", ""))
            elif meth == "Log.entryAdded":
                entry = p.get("entry", {})
                report["log"].append({"level": entry.get("level"), "source": entry.get("source"),
                                      "text": entry.get("text")})
        width, height, channels, rows = decode_png(png)
        report["screenshot"] = {"width": width, "height": height}
        # Per svg: pixels that are neither white nor near-white (what it drew).
        for s in report["svgs"]:
            x0, y0 = max(0, int(s["x"])), max(0, int(s["y"]))
            x1, y1 = min(width, int(s["x"] + s["w"])), min(height, int(s["y"] + s["h"]))
            inked = warm = 0
            for y in range(y0, y1):
                row = rows[y]
                for x in range(x0, x1):
                    r, g, b = row[x * channels], row[x * channels + 1], row[x * channels + 2]
                    if r < 235 or g < 235 or b < 235:
                        inked += 1
                    # the heat ramp: red high, blue well below (yellow through dark red)
                    if r > 150 and b < 140 and r - b > 60:
                        warm += 1
            s["inked_px"] = inked
            s["warm_px"] = warm
    except Exception as ex:  # report what failed, as data
        report["error"] = f"{type(ex).__name__}: {ex}"
    finally:
        try:
            pipe.send("Browser.close")
        except Exception:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        subprocess.run(["rm", "-rf", profile], check=False)
    print(json.dumps(report))
    return 0 if report["loaded"] and "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
