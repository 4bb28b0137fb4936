"""Writes ``examples/visits.csv``, the sample file of the README's own-data and central
commands: 5 000 visits of 800 users (synthetic, seeded), one row per visit with the user,
the minutes spent (0–120, public range) and the region.

    python examples/make_visits.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def main() -> None:
    g = np.random.default_rng(2024)
    counts = 1 + g.multinomial(5000 - 800, g.dirichlet(np.full(800, 0.7)))
    home = g.choice(["north", "south", "east", "west"], size=800, p=[0.4, 0.3, 0.2, 0.1])
    rows = ["user,minutes,region"]
    for u in range(800):
        mu = g.gamma(2.0, 12.0)  # the user's typical visit length
        for _ in range(counts[u]):
            minutes = min(g.exponential(mu), 120.0)
            region = home[u] if g.random() < 0.8 else g.choice(["north", "south", "east",
                                                                  "west"])
            rows.append(f"user{u:03d},{minutes:.1f},{region}")
    Path(__file__).with_name("visits.csv").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
