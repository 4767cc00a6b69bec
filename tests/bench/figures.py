"""How the benchmarks print their figures: the machine they ran on (a figure means little
without it) and one labelled row of a table."""

from __future__ import annotations

import os
import platform
from pathlib import Path

MIB = 2**20


def machine() -> str:
    """CPU model, cores, memory and kernel: what the README's figures need beside them."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line),
        platform.machine(),
    )
    meminfo = Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]
    return (
        f"{model}, {os.cpu_count()} cores, {int(meminfo) / 2**20:.1f} GiB, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def row(label: str, value: str) -> None:
    print(f"  {label:<58} {value}")
