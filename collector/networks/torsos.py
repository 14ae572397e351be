"""The names of the convolutional torsos over pixel frames (no torch: config checks read them).

``nature`` is Mnih et al. (2015)'s CNN, ``impala`` Espeholt et al. (2018)'s ResNet, the IMPALA
paper's network (this module belongs to IMPALA's registration for that reason); both are built
in :mod:`collector.networks.cnn`.
"""

from __future__ import annotations

TORSOS = ("nature", "impala")
