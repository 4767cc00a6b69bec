"""A client of ``rotator dev``'s gateway in a process of its own, as a user's program would be:
``python -m tests.support.devclient URL OUT RATE MODEL...`` (the master key in the environment,
``DEV_GATEWAY_KEY``) sends ``RATE`` chat completions a second through ``URL``, over the models
in turn, each from a thread of its own (a slow answer does not slow the rate), and writes one
JSON line per request to ``OUT``: model, start, end, status, and on a failure the start of the
answer. SIGTERM stops it: the requests under way are awaited, then it exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType


def chat(url: str, key: str, model: str) -> tuple[int, str]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=body.encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = response.read().decode(errors="replace")
            return response.status, "" if '"chat.completion"' in answer else answer[:300]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(300).decode(errors="replace")
    except OSError as exc:
        return 0, f"{type(exc).__name__}: {exc}"


def main(argv: list[str]) -> int:
    url, out, rate, models = argv[0], Path(argv[1]), float(argv[2]), argv[3:]
    key = os.environ["DEV_GATEWAY_KEY"]
    stop = threading.Event()
    lock = threading.Lock()

    def on_term(_: int, __: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    with out.open("a") as sink:

        def one(model: str) -> None:
            start = time.time()
            status, body = chat(url, key, model)
            line = {"model": model, "start": start, "end": time.time(), "status": status}
            if status != 200 or body:
                line["body"] = body
            with lock:
                sink.write(json.dumps(line) + "\n")
                sink.flush()

        threads = []
        n = 0
        next_at = time.monotonic()
        while not stop.wait(max(0.0, next_at - time.monotonic())):
            thread = threading.Thread(target=one, args=(models[n % len(models)],))
            thread.start()
            threads.append(thread)
            n += 1
            next_at += 1 / rate
        for thread in threads:
            thread.join(90)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
