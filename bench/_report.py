"""What both benchmark scripts report the same way: the environment, and the ratio-vs-goal plot."""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any

import numpy as np
import torch


def load_average() -> tuple[float, ...]:
    """The machine's 1, 5 and 15 minute load averages (empty where the OS has none)."""
    return os.getloadavg() if hasattr(os, "getloadavg") else ()


def environment(load_before: tuple[float, ...], **extra: Any) -> dict[str, Any]:
    """What the numbers depend on: date, versions, threads, CPUs, load before and after, plus ``extra``."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "torch_default_num_threads": torch.get_num_threads(), "cpu_count": cpus,
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in load_average()],
        **extra,
    }


def plot_ratios(axes: Any, configs: dict[str, dict[str, Any]], ylabel: str) -> None:
    """One bar per config (green: goal met), its goal as a dashed line, the ratio written on top."""
    positions = np.arange(len(configs))
    ratios = [config["ratio"] for config in configs.values()]
    colors = ["tab:green" if config["passed"] else "tab:red" for config in configs.values()]
    axes.bar(positions, ratios, width=0.6, color=colors)
    for position, config in zip(positions, configs.values()):
        axes.hlines(config["goal"], position - 0.4, position + 0.4, colors="black", linestyles="--")
        axes.annotate(f"{config['ratio']:.3f}x", (position, config["ratio"]), ha="center", va="bottom")
    axes.set_xticks(positions, [config["title"] for config in configs.values()], fontsize=8)
    axes.set_ylabel(ylabel)
    axes.set_ylim(0, max(1.2, max(ratios) * 1.15))
    axes.set_title("Ratio (dashed: goal)")
