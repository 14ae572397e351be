"""Progress reporting: a tqdm bar on a terminal, plain periodic lines otherwise.

Under ``ray job logs`` or a pipe, standard output is not a TTY, so the reporter prints one line
per progress event (``controller.log_interval_s``); on a terminal it draws a tqdm bar of frames
out of ``total_frames`` with frames/s, return and optimizer steps.
"""

from __future__ import annotations

import math
import sys

from tqdm import tqdm


def progress_line(snapshot: dict) -> str:
    """One plain progress line."""
    mean = snapshot["episode_return_mean"]
    shown = "-" if math.isnan(mean) else f"{mean:.1f}"
    line = (
        f"frames {snapshot['frames']:,}/{snapshot['total_frames']:,} | "
        f"{snapshot['frames_per_s']:,.0f} frames/s | optim steps {snapshot['optim_steps']:,} | "
        f"return {shown}"
    )
    explore = snapshot.get("exploration", {})
    if "epsilon" in explore:
        line += f" | eps {explore['epsilon']:.3f}"
    return line


class ProgressReporter:
    """Controller ``progress`` hook that draws a bar or prints lines.

    Args:
        stream: Output stream (standard output by default).
        bar: Force the bar on or off; default: on when ``stream`` is a TTY.
    """

    def __init__(self, stream=None, *, bar: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.use_bar = self.stream.isatty() if bar is None else bar
        self.bar: tqdm | None = None

    def __call__(self, controller, snapshot: dict) -> None:
        """Reports one snapshot."""
        if not self.use_bar:
            print(progress_line(snapshot), file=self.stream, flush=True)
            return
        if self.bar is None:
            self.bar = tqdm(
                total=snapshot["total_frames"], unit="frames", file=self.stream, dynamic_ncols=True
            )
        self.bar.update(snapshot["frames"] - self.bar.n)
        mean = snapshot["episode_return_mean"]
        self.bar.set_postfix(
            fps=f"{snapshot['frames_per_s']:,.0f}",
            ret="-" if math.isnan(mean) else f"{mean:.1f}",
            steps=snapshot["optim_steps"],
            refresh=True,
        )

    def close(self) -> None:
        """Closes the bar, if any."""
        if self.bar is not None:
            self.bar.close()
