"""Screenshots of a real sweep's live progress, for the README.

Runs ``python -m tuner sweep FILE`` in a pseudo-terminal of COLUMNS x LINES, feeds its
output to a terminal emulator (pyte), and saves the screen as SVG (rich's export) when
the view first shows ``--when`` (a substring, e.g. "2/6 done") and again when the sweep
ends. Convert to PNG with a browser, e.g. ``chromium --headless --screenshot=x.png x.svg``.

    pip install pyte
    python docs/screenshot_progress.py mnist_asha.yaml --when "3/6 done" --out docs/img
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import subprocess
import sys
from pathlib import Path


def _save(screen, path: Path, title: str) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=screen.columns, file=open(os.devnull, "w"))  # noqa: SIM115
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    for line in lines:
        console.print(Text(line), soft_wrap=True)
    console.save_svg(str(path), title=title)
    print(f"wrote {path}")


def main() -> int:
    import pyte

    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--when", default="done:", help="save the screen the first time it shows this")
    parser.add_argument("--out", default="docs/img")
    parser.add_argument("--columns", type=int, default=100)
    parser.add_argument("--lines", type=int, default=30)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    screen = pyte.Screen(args.columns, args.lines)
    stream = pyte.ByteStream(screen)
    leader, follower = pty.openpty()
    os.set_blocking(leader, False)
    import fcntl
    import struct
    import termios

    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", args.lines, args.columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(args.columns), "LINES": str(args.lines), "TERM": "xterm-256color"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tuner", "sweep", args.file], stdin=follower, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    saved = False
    while True:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            stream.feed(data)
            if not saved and any(args.when in line for line in screen.display):
                _save(screen, out / "progress.svg", f"python -m tuner sweep {args.file}")
                saved = True
        elif process.poll() is not None:
            break
    process.wait()
    _save(screen, out / "progress-end.svg", f"python -m tuner sweep {args.file}")
    return process.returncode


if __name__ == "__main__":
    raise SystemExit(main())
