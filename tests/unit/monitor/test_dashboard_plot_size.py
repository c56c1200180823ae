"""scripts.monitor.dashboard.plot_panels: the figure notebook 07 embeds stays under 150 KB (CONTRIBUTING.md)."""
import random

import matplotlib

matplotlib.use("Agg")

from fakes import embedded_png_bytes  # noqa: E402
from scripts.monitor.dashboard import load, panels, plot_panels  # noqa: E402


class NoisyProm:
    """Three jagged series per query over ten minutes (notebook 07 plotted 64 series in 9 panels): random walks,
    harder for PNG compression than real metrics."""

    def query_range(self, expr, start, end, step):
        rng = random.Random(expr)
        out = []
        for s in range(3):
            value, values = 0.0, []
            for i in range(int((end - start) / step)):
                value = max(0.0, value + rng.gauss(0, 1))
                values.append((start + i * step, value))
            out.append({"labels": {"model": f"model-{s}", "version": "1"}, "values": values})
        return out


def test_dashboard_figure_embeds_under_150_kb():
    assert len([p for p in panels(load()) if p.get("targets")]) >= 9
    assert embedded_png_bytes(plot_panels(NoisyProm(), 0.0, 600.0, marks={"phase B": 300.0})) <= 150_000
