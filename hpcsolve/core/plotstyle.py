"""Small plotting helpers shared by the families' plots and compare (matplotlib, Agg)."""

from __future__ import annotations


def colorbar(fig, ax, mappable, label: str):
    """A colorbar exactly as tall as the axes (also with an equal aspect ratio), labelled with its unit."""
    from mpl_toolkits.axes_grid1 import make_axes_locatable

    cax = make_axes_locatable(ax).append_axes("right", size="3%", pad=0.08)
    return fig.colorbar(mappable, cax=cax, label=label)
